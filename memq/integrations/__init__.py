"""memq as the memory backend of the agent frameworks people already use.

Each module is a thin translation between one framework's interface and memq's public
API (``from memq import ...``), installed with its extra:

=============================  ===============================  ======================
module                         class / command                  extra
=============================  ===============================  ======================
``integrations.langchain``     ``MemqChatMessageHistory``       ``memq[langchain]``
``integrations.openai_agents`` ``MemqSession``                  ``memq[openai-agents]``
``integrations.langgraph``     ``MemqStore``                    ``memq[langgraph]``
``integrations.mcp``           ``memq mcp``                     ``memq[mcp]``
=============================  ===============================  ======================

Every adapter takes an optional ``client=``: a :class:`memq.MemoryClient`, or anything
with the same methods (a remote client); without one it uses ``MemoryClient.from_env()``.
Importing this package imports no framework; each module imports only its own.
"""
