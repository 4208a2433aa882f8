"""A hung job: ranks stopped inside MPI calls that waited long for another rank.

``ddltrace run`` keeps every call a rank was inside when the job was stopped (Ctrl-C, a time limit, a kill): the
PMPI collector's record of it has no end, the manifest lists it (``open_calls``) and the timeline has it last until
the rank's end. It measures, per rank, how long its open call had lasted: a rank whose open call had lasted
``hang.blocked_min_ns`` (1 s) or more was blocked, waiting for another rank. The collector's own clock
synchronisation inside MPI_Finalize is not the job's call: a rank stopped there had left the job's code (after
Ctrl-C, its Python's exit). The wait runs to the stop (the store's ``interrupted_ns``: the first Ctrl-C, SIGTERM or
SIGHUP ``run`` received), else to the rank's end. The finding names the blocked ranks, their calls and how long they
had waited (ns), and the ranks they wait for: the partners their open point-to-point calls name, and the ranks that
were in no such call (a rank computing, sleeping or stuck outside MPI holds up every collective the others entered),
and the ranks of the world the store holds no timeline of (a node whose part was not gathered: what they did is not
known, so they may be the ones waited for). Where every rank of the world was blocked, none of them can be the one
the others wait for: a deadlock, with what each open
point-to-point call waits for (a receive no rank sends to shows there: rank 0's MPI_Recv waits for rank 2, in
MPI_Barrier).

Cost: the longest of the blocked ranks' waits (the job lost at least that much before it was stopped).
"""

from __future__ import annotations

from ddltrace.analyses.findings import Finding, Quantity, detector
from ddltrace.analyses.phases import CLOCK_SYNC
from ddltrace.analyses.rank_summary import stopped_at
from ddltrace.analyses.requirements import open_calls
from ddltrace.store import rank_ranges

#: No stop recorded: a call's wait runs to its end (ns).
END = 2**63 - 1
#: The blocked ranks whose open call and wait the evidence lists, at most.
SHOWN = 8
ADVICE = ("Look at what the awaited ranks were doing when the job was stopped (their last calls in the timeline, "
          "py-spy's stacks with --pyspy): a rank stuck in its own code, a receive that no send matches, a collective "
          "some ranks never enter (a branch on the rank, an early exit). A deadlock: the ranks' open calls wait for "
          "each other.")


@detector("hang", "a hung job (ranks stopped blocked inside MPI calls)", {"timeline", "open_calls"})
def detect(runs, th) -> list[Finding]:
    """Ranks stopped inside an MPI call open for hang.blocked_min_ns or more (see the module docstring)."""
    findings = []
    for run in runs:
        stop = stopped_at(run.store)
        blocked: dict[int, tuple[str, int]] = {}  # rank: (its longest open call, how long it had waited, ns)
        awaited: set[int] = set()
        edges: list[tuple[int, str, int]] = []  # (rank, its open point-to-point call, the partner it names)
        for rank in run.store.ranks:
            names = set(open_calls(run.store, rank)) - {CLOCK_SYNC}  # (the collector's own, in MPI_Finalize)
            if not names:
                continue
            timeline = run.store.timeline([rank])
            ends = timeline["start_ns"] + timeline["dur_ns"]
            last = timeline[timeline["name"].astype(str).isin(names) & (ends == ends.max())]
            if not len(last):
                continue
            row = last.loc[last["dur_ns"].idxmax()]
            wait = min(int(row["start_ns"] + row["dur_ns"]), stop or END) - int(row["start_ns"])
            if wait >= th["hang.blocked_min_ns"]:
                blocked[rank] = (str(row["name"]), wait)
                with_peer = last.dropna(subset=["peer"])
                for name, peer in zip(with_peer["name"].astype(str), with_peer["peer"].astype(int), strict=True):
                    if 0 <= peer != rank:
                        awaited.add(peer)
                        edges.append((rank, name, peer))
        if not blocked:
            continue
        free = [r for r in run.store.ranks if r not in blocked]
        missing = set(run.store.missing()) - set(blocked)  # ranks of the world the store holds no timeline of
        awaited = (awaited | set(free) | missing) - set(blocked)
        ranks = sorted(blocked)
        longest = max(wait for _, wait in blocked.values())
        calls = sorted({name for name, _ in blocked.values()})
        unseen = sorted(awaited & missing)
        waits = (f"for rank{'s' if len(awaited) > 1 else ''} {rank_ranges(sorted(awaited))}"
                 + (f" (rank{'s' if len(unseen) > 1 else ''} {rank_ranges(unseen)} not in the store: "
                    "what it did is not known)" if unseen else "") if awaited else
                 "for each other: every rank was blocked (a deadlock"
                 + "".join(f"; rank {r}'s {name} waits for rank {peer}, in {blocked[peer][0]}"
                           for r, name, peer in edges[:SHOWN] if peer in blocked) + ")")
        named = sorted({peer for _, _, peer in edges})
        findings.append(Finding(
            id="hang",
            title=f"Hung: rank{'s' if len(ranks) > 1 else ''} {rank_ranges(ranks)} stopped blocked in "
                  f"{', '.join(calls)} for up to {Quantity(float(longest), 'ns')}, waiting {waits}",
            severity="error",
            evidence={"blocked_ranks": Quantity(len(ranks), "ranks"),
                      "longest_wait": Quantity(float(longest), "ns"),
                      **{f"rank_{r}_{name}": Quantity(float(wait), "ns")  # (the first ranks' calls)
                         for r, (name, wait) in sorted(blocked.items())[:SHOWN]},
                      "awaited_ranks": Quantity(len(awaited), "ranks"),
                      **({"awaited_ranks_not_in_store": Quantity(len(unseen), "ranks")} if unseen else {})},
            ranks=sorted(awaited) or named or ranks, phase="all", advice=ADVICE, store=run.name, cost_ns=float(longest),
            cost_basis="the longest wait of a blocked rank, from its open call's start to the stop"
                       + ("" if stop else " (none recorded: to the rank's end)")))
    return findings
