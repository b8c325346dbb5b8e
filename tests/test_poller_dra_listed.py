"""The poller says once when DRA drivers prepared claims this boot that the kubelet's
List does not show: a kubelet before 1.34 leaves dynamic_resources out unless the
KubeletPodResourcesDynamicResources feature gate is on, and the claims' devices then
show as nobody's without a word."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from exporter.app import Exporter, demo_collectors
from exporter.cli import parse_config
from exporter.poller import UNLISTED_CLAIMS_POLLS
from exporter.sim.node import SimulatedNode

EVENT = "dra_claims_not_listed"


async def _warnings(sim_node: SimulatedNode, gate: list[bool]) -> list[list[dict[str, Any]]]:
    """Per poll of one exporter, with the kubelet's gate as ``gate`` says at each: the
    warnings logged, as (level, prepared devices, listed pods)."""
    config = parse_config([*sim_node.exporter_flags(), "--node-name", "demo-node"], {})
    exporter = Exporter(config, collectors=demo_collectors(config, sim_node))
    found = []
    try:
        for on in gate:
            sim_node.kubelet.dynamic_resources = on
            with capture_logs() as logs:
                await exporter.poller.poll_once()
            found.append(
                [
                    {k: e[k] for k in ("log_level", "prepared_devices", "listed_pods")}
                    for e in logs
                    if e["event"] == EVENT
                ]
            )
    finally:
        await exporter.close()
    return found


class TestClaimsNotListed:
    async def test_warns_once_when_it_lasts(self, sim_node: SimulatedNode) -> None:
        """The demo's NVIDIA checkpoint holds two devices of this boot and List names no
        claim: one warning at the UNLISTED_CLAIMS_POLLS-th poll in a row (a claim whose
        pod just left List stays in the checkpoint until unprepared), never repeated."""
        pods = len(sim_node.kubelet.listed_pods())
        warning = {"log_level": "warning", "prepared_devices": 2, "listed_pods": pods}
        expected = [[]] * (UNLISTED_CLAIMS_POLLS - 1) + [[warning]] + [[]] * 3
        assert expected == await _warnings(sim_node, [False] * (UNLISTED_CLAIMS_POLLS + 3))

    async def test_again_only_after_list_named_claims(self, sim_node: SimulatedNode) -> None:
        """Quiet while List names the claims; said when it stops, and again only after it
        named them in between (the gate turned on, then off by a kubelet downgrade)."""
        off = [False] * UNLISTED_CLAIMS_POLLS
        said = [[]] * (UNLISTED_CLAIMS_POLLS - 1) + [[1]]
        warnings = await _warnings(sim_node, [True, True, *off, True, *off])
        assert [[], [], *said, [], *said] == [[1] * len(w) for w in warnings]

    async def test_polls_without_list_are_not_counted(self, sim_node: SimulatedNode) -> None:
        """Polls whose List failed compare nothing (the pods are the last good ones): they
        neither count towards the warning nor end the count."""
        from exporter.sim.kubelet import V1_LIST

        config = parse_config([*sim_node.exporter_flags(), "--node-name", "demo-node"], {})
        exporter = Exporter(config, collectors=demo_collectors(config, sim_node))
        sim_node.kubelet.dynamic_resources = False
        try:
            with capture_logs() as logs:
                await exporter.poller.poll_once()  # one poll of List without the claims
                sim_node.kubelet.undecodable = {V1_LIST}
                for _ in range(UNLISTED_CLAIMS_POLLS):
                    await exporter.poller.poll_once()
        finally:
            await exporter.close()
        assert [] == [e for e in logs if e["event"] == EVENT]
