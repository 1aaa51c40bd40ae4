"""Ranking: how ``get_context`` finds what an agent needs.

- :mod:`.profiles`: the branches (recency, importance, semantic, lexical, relevance) and
  the profiles that combine them (``[retrieval] profile``);
- :mod:`.fusion`: relevance's rules, fusing lexical and semantic evidence;
- :mod:`.sources`: what the branches read (working memory, the read pool, the vector cache).
"""
