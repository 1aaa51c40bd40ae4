"""The test helpers' own promises: ports handed out must not collide."""

from __future__ import annotations

import pytest

from memq import testing
from memq.testing import PORT_BASE, PORTS_PER_PROCESS, free_port


def test_ports_asked_for_back_to_back_differ_before_either_is_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A test asks for two ports, then starts two servers: the second port is not the
    first, even when the draw offers the same port first (nothing is bound between the two
    calls, so only memory tells them apart)."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    monkeypatch.setattr(testing.random, "sample", lambda population, k: list(population)[:k])
    ports = [free_port() for _ in range(40)]
    assert len(set(ports)) == len(ports)
    low = PORT_BASE + 3 * PORTS_PER_PROCESS
    assert all(low <= port < low + PORTS_PER_PROCESS for port in ports)
