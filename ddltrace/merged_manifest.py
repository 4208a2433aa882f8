"""The manifest of a store merged from two stores of one job (``ddltrace merge``, ddltrace/store.py's
``merge_stores``; a node's part joined by collectors/node_merge.py): what stays true of each store's notes, its
ranks' clock alignment and the run's world size once the two are one store.

- Notes: a note both stores carry is kept once; a note of one store only is kept naming that store (once: a note
  a merged store already names its store by is kept as it is). Where the second store's ranks were renumbered
  (``merge_stores(renumber=True)``), its notes keep its own rank numbers and their tag says how they map. The notes on
  ranks none of whose files reached a store (collectors/launcher.py's :func:`no_record_note`) are false for the
  ranks the other store supplies: they are replaced by one note on the ranks the merged store still lacks, if any;
  a note that a store left a rank out (its file unreadable) says where the other store supplies it. A note on ranks
  whose trace was given but gave no timeline (:func:`unread_note`: a file of an import that did not read, a rank an
  export did not hold, a rank a merge left out) is kept for the ranks it names, with the other store's rank numbers
  where it was renumbered, and says which of them the other store supplies. These notes' ranks are read as the
  ranges they list (:class:`Ranks`), and a note naming a rank past its store's world is kept named damaged
  (:func:`past_the_world`), not read.
  An import's ``import problem:`` notes are kept: :meth:`TraceStore.missing` reads them to say why a rank of the
  file they name holds no events.
- Missing nodes: a node whose part a store did not gather (``run.missing_nodes``, and its ``missing node HOST:``
  note, collectors/node_clock.py) is no longer missing where the other store holds ranks on that host (its part
  joined: :func:`joined_nodes`, :func:`still_missing`; collectors/node_merge.py joins a part the same way).
- Clock: each rank's entries (offset, uncertainty, drift, ... in ns, ppm) from the store that held the rank. Two
  stores whose clocks were aligned differently (another method, or onto another reference rank) are not on one
  clock: the method says so by rank, and a note does.
- World size: the stores' declared world sizes (``run.world_size``, or the ranks a store lists where its run gives
  none); where they differ, or the ranks held reach past them, the largest, and a note says so. Ranks of the world
  held by neither store are named missing by :meth:`TraceStore.missing`.
- Uncategorised events (``uncategorised``, ``info``'s ``uncategorised:`` line): the rows of both stores, a row both
  carry once (:func:`merged_uncategorised`).

Before any of that, stores evidently of two runs are refused (:func:`not_one_run`: their world sizes, their runs'
commands or their job configurations differ where both record one), unless the user says they are one run
(:data:`AS_ONE_RUN`).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A note of :func:`no_record_note`: the ranks it names.
_UNFILED = re.compile(r"^ranks \[([\d, -]*)\]:? (?:of \d+ )?(?:wrote no|no) (record file|framework profile)")
#: A note of :func:`unread_note`: the ranks it names, and where its text after them starts.
_UNREAD = re.compile(r"^ranks \[([\d, -]*)\]: (?=(?:its file was given and did not read|in no file read|not in the "
                     r"export|left out of the merge)\b)")
#: What a note of :func:`unread_note` says of its ranks, by how they came to be without a timeline.
UNREAD_FILE = "its file was given and did not read"
NO_FILE_READ = "in no file read"
NOT_EXPORTED = "not in the export"
NOT_MERGED = "left out of the merge"
#: One item of a note's list of ranks: a rank or a range (at most 18 digits: a rank is below 2^31).
_SPAN = re.compile(r"(\d{1,18})(?:-(\d{1,18}))?")
#: A note on a rank a store left out (collectors/launcher.py: an unreadable record file): the rank.
_LEFT_OUT = re.compile(r"; rank (\d+) left out$")
#: A note already naming the store it is of (a store merged before): named once.
_TAGGED = re.compile(r" \(a note of [^()]*\)$")
#: A note on a node whose part was not gathered (collectors/node_clock.py's ``lost_notes``): the node.
_MISSING_NODE = re.compile(r"^missing node (\S+): ")
#: The clock entry's tables keyed by rank (collectors/clock.py, collectors/launcher.py, ddltrace import).
_CLOCK_BY_RANK = ("offsets_ns", "uncertainty_ns", "finalize_offsets_ns", "finalize_uncertainty_ns", "drift_ppm",
                 "framework_offsets_ns", "framework_uncertainty_ns", "per_rank")
#: The clock entry's tables keyed by host (collectors/node_clock.py).
_CLOCK_BY_NODE = ("node_offsets_ns", "node_uncertainty_ns", "node_end_offsets_ns", "node_end_uncertainty_ns",
                  "node_drift_ppm")


@dataclass
class MergedPart:
    """One of the merged stores: its folder, its manifest, the ranks taken from it (its own numbers) and the number
    added to them in the merged store (``shift``: 0 unless renumbered), its world size (``declared``: the run's, or
    the ranks it lists; ``said``: whether its run gives one)."""

    path: Path
    manifest: dict
    ranks: list[int]
    shift: int
    declared: int
    said: bool

    @property
    def held(self) -> list[int]:
        """The ranks taken from this store, as the merged store numbers them."""
        return [r + self.shift for r in self.ranks]

    @property
    def hosts(self) -> set[str]:
        """The hosts of the ranks taken from this store (each rank's manifest ``host``)."""
        ranks = self.manifest.get("ranks") or {}
        return {str(host) for r in self.ranks if (host := (ranks.get(str(r)) or {}).get("host"))}

    @property
    def missing_nodes(self) -> dict:
        """This store's nodes whose parts were not gathered (``run.missing_nodes``: host -> the folder of its part
        on that node)."""
        missing = (self.manifest.get("run") or {}).get("missing_nodes")
        return missing if isinstance(missing, dict) else {}


def joined_nodes(first: MergedPart, second: MergedPart) -> set[str]:
    """The nodes one store names missing whose ranks the other holds: their parts are in the merged store."""
    return ((set(first.missing_nodes) & second.hosts) | (set(second.missing_nodes) & first.hosts))


def still_missing(missing_nodes: dict | None, joined: Iterable[str]) -> dict:
    """``missing_nodes`` (``run.missing_nodes``) less the nodes ``joined`` (their parts now in the store)."""
    joined = set(joined)
    return {host: part for host, part in (missing_nodes or {}).items() if host not in joined}


def on_joined_node(note: Any, joined: Iterable[str]) -> bool:
    """Whether ``note`` is a ``missing node HOST:`` note of a node ``joined`` (false once its part is in the
    store)."""
    found = _MISSING_NODE.match(note) if isinstance(note, str) else None
    return found is not None and found.group(1) in set(joined)


def no_record_note(ranks: list[int] | Ranks, world: int, mpi: bool, missing_nodes: dict | None) -> str:
    """The note on the ``ranks`` none of whose files reached the store. With nodes missing (their parts not
    gathered: collectors/node_link.py) a rank's file may be in such a part, not lost: the note says so."""
    from ddltrace.store import rank_ranges

    what, why = ("record file", "died before MPI_Init, or never started") if mpi else ("framework profile",
                                                                                       "never wrote one")
    # '[0-99999]', not 100,000 numbers (ranges since session 16; both are read)
    ranks = f"[{ranks.text() if isinstance(ranks, Ranks) else rank_ranges(ranks)}]"
    if missing_nodes:
        return (f"ranks {ranks}: no {what} gathered (in the part of missing node(s) {', '.join(sorted(missing_nodes))}"
                f", which `ddltrace merge` joins, or {why})")
    return f"ranks {ranks} wrote no record file ({why})" if mpi else f"ranks {ranks} of {world} wrote no {what}"


def unread_note(ranks: list[int], why: str) -> str:
    """The note on ``ranks`` of the run whose trace was given but gave the store no timeline, and why: ``why`` starts
    with what happened (:data:`UNREAD_FILE`, :data:`NO_FILE_READ`, :data:`NOT_EXPORTED` or :data:`NOT_MERGED`) and
    names the file and what was wrong with it. :meth:`TraceStore.missing` (through :func:`unfiled_ranks`) gives it as
    the reason each of those ranks is missing, and ``info`` shows it on its ``not listed`` line."""
    from ddltrace.store import rank_ranges

    note = f"ranks [{rank_ranges(sorted(set(ranks)))}]: {why}"
    if not _UNREAD.match(note):
        raise ValueError(f"not a note of unread ranks: {note[:120]!r}")
    return note


class Ranks(Set):
    """The ranks a note lists, kept as the ranges it lists them in (a set of ints to read: ``in``, ``len``, iteration,
    ``==``): a note's ``[0-2147483647]`` is one range, not 2^31 numbers (a damaged or hostile manifest's note
    would take gigabytes as a set). :attr:`top` is the highest; :meth:`text` writes them as a note lists them."""

    __slots__ = ("_spans", "_firsts")

    def __init__(self, spans: Iterable[tuple[int, int]] = ()):
        merged: list[list[int]] = []
        for first, last in sorted(spans):
            if merged and first <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], last)
            else:
                merged.append([first, last])
        self._spans = [(first, last) for first, last in merged]
        self._firsts = [first for first, _ in self._spans]

    @classmethod
    def parse(cls, text: str) -> Ranks | None:
        """The ranks of a note's list: '3, 5' (before session 16) or '0-4, 7' (:func:`~ddltrace.store.rank_ranges`);
        None where it is not such a list ('1-2-3', '5-3', '-5', a number of thousands of digits)."""
        spans = []
        for item in (part.strip() for part in text.split(",")):
            found = _SPAN.fullmatch(item)
            if item and not found:
                return None
            if found:
                first, last = int(found.group(1)), int(found.group(2) or found.group(1))
                if last < first:
                    return None
                spans.append((first, last))
        return cls(spans)

    def __contains__(self, rank: object) -> bool:
        if type(rank) is not int:
            return False
        at = bisect_right(self._firsts, rank) - 1
        return at >= 0 and rank <= self._spans[at][1]

    def __iter__(self) -> Iterator[int]:
        for first, last in self._spans:
            yield from range(first, last + 1)

    def __len__(self) -> int:
        return sum(last - first + 1 for first, last in self._spans)

    def __eq__(self, other: object) -> bool:  # (not Set's: it would go through every rank of the ranges)
        if isinstance(other, Ranks):
            return self._spans == other._spans
        if isinstance(other, Set):
            return len(other) == len(self) and all(r in self for r in other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Ranks([{self.text()}])"

    @property
    def top(self) -> int:
        """The highest rank listed (-1 where none is)."""
        return self._spans[-1][1] if self._spans else -1

    def shifted(self, by: int) -> Ranks:
        """These ranks with ``by`` added to each (a renumbered store's)."""
        return Ranks((first + by, last + by) for first, last in self._spans)

    def union(self, other: Ranks) -> Ranks:
        return Ranks([*self._spans, *other._spans])

    def without(self, ranks: Iterable[int]) -> Ranks:
        """These ranks less ``ranks`` (a store's: as many as it holds, not as many as a note may list)."""
        cut = sorted({r for r in ranks if r in self})
        spans, at = [], 0
        for first, last in self._spans:
            while at < len(cut) and cut[at] <= last:
                if cut[at] > first:
                    spans.append((first, cut[at] - 1))
                first = cut[at] + 1
                at += 1
            if first <= last:
                spans.append((first, last))
        return Ranks(spans)

    def text(self) -> str:
        """'0-3, 7', as :func:`~ddltrace.store.rank_ranges` writes the list ('none' where empty)."""
        return ", ".join(f"{a}-{b}" if b != a else f"{a}" for a, b in self._spans) or "none"



def unfiled_ranks(note: Any, world: int | None = None) -> Ranks | None:
    """The ranks of a note of :func:`no_record_note` or of :func:`unread_note` (ranks the run knows it has no
    timeline of, and why), or None for another note, one whose list is not one of ranks, or, given the run's
    ``world`` size, one that names a rank past it (damaged: see :func:`past_the_world`)."""
    found = (_UNFILED.match(note) or _UNREAD.match(note)) if isinstance(note, str) else None
    ranks = Ranks.parse(found.group(1)) if found else None
    return ranks if ranks is not None and (world is None or ranks.top < world) else None


def unread_ranks(note: Any, world: int | None = None) -> Ranks | None:
    """The ranks of a note of :func:`unread_note`, or None for another note (one of :func:`no_record_note` too; and
    as :func:`unfiled_ranks`, one past ``world``)."""
    found = _UNREAD.match(note) if isinstance(note, str) else None
    ranks = Ranks.parse(found.group(1)) if found else None
    return ranks if ranks is not None and (world is None or ranks.top < world) else None


def past_the_world(note: Any, world: int) -> str | None:
    """The note, named damaged, where it is one of :func:`unfiled_ranks` naming a rank past the ``world`` of its
    store: it says nothing true of the run's ranks (a note of ranks [0-2147483647] in a world of 4), so it is kept as
    text that no longer reads as one (:meth:`TraceStore.missing` does not give it as a reason, a merge does not make
    a note on the ranks it lists); None for any other note."""
    ranks = unfiled_ranks(note)
    if ranks is None or ranks.top < world:
        return None
    return (f"damaged note (it names rank {ranks.top}, past the world of {world}: not read as the ranks the run has "
            f"no timeline of): {note}")


def still_unfiled(notes: Iterable[tuple[Any, int]], held: Iterable[int], world: int,
                  missing_nodes: dict | None) -> str | None:
    """The note on the ranks that ``notes`` (each with the number added to its store's ranks) name as having no file
    (a record file of an MPI job, or a framework profile, as the notes say) and that the merged store still lacks
    (it holds ``held``); None where it lacks none of them. A note naming a rank past ``world`` is not read
    (:func:`past_the_world`)."""
    found = [(m, ranks.shifted(shift)) for note, shift in notes if isinstance(note, str)
             and (m := _UNFILED.match(note)) and (ranks := Ranks.parse(m.group(1))) is not None
             and ranks.top + shift < world]
    named = Ranks()
    for _, ranks in found:
        named = named.union(ranks)
    left = named.without(held)
    mpi = any(m.group(2) == "record file" for m, _ in found)
    return no_record_note(left, world, mpi, missing_nodes) if left else None


def merged_notes(first: MergedPart, second: MergedPart, held: Iterable[int], run: dict) -> list[str]:
    """The notes of the two stores that stay true of the merged store (holding ``held``, of the run ``run``): a
    note both carry once, a note of one store followed by ``(a note of STORE)``, and in place of their notes on
    ranks with no file the one on those it still lacks, and a note on a rank left out that the other store supplies
    saying so; no ``missing node HOST:`` note of a node whose ranks it now holds (see the module). A note of a
    store whose ranks were renumbered (``shift``) says how its rank numbers map to the merged store's; a note on
    ranks whose trace gave no timeline (:func:`unread_note`) names them as the merged store numbers them."""
    from ddltrace.store import rank_ranges

    joined = joined_nodes(first, second)
    notes_of = [[n for n in part.manifest.get("notes") or [] if isinstance(n, str) and not on_joined_node(n, joined)]
                for part in (first, second)]
    # a note on ranks with no timeline that names ranks past its store's world is damaged: named so, not read
    damaged = [{n: d for n in notes if (d := past_the_world(n, part.declared))}
               for part, notes in zip((first, second), notes_of, strict=True)]
    notes_of = [[damaged_of.get(n, n) for n in notes] for notes, damaged_of in zip(notes_of, damaged, strict=True)]
    # renumbered, a note both carry may be on different ranks: each is kept, naming its store
    both = set(notes_of[0]) & set(notes_of[1]) if not (first.shift or second.shift) else set()
    kept: list[str] = []
    for part, other, notes in ((first, second, notes_of[0]), (second, first, notes_of[1])):
        # a renumbered store's notes keep its rank numbers: the tag says how they map
        of = f"a note of {part.path}" + (f", whose rank r is rank r + {part.shift} here" if part.shift else "")
        for note in notes:
            unread = _UNREAD.match(note)
            if unread:  # on ranks as the merged store numbers them, and which of them the other store supplies
                ranks = (Ranks.parse(unread.group(1)) or Ranks()).shifted(part.shift)
                if part.shift:
                    note = f"ranks [{ranks.text()}]: {note[unread.end():]}"
                supplied = sorted(r for r in set(other.held) if r in ranks)
            elif unfiled_ranks(note) is not None:
                continue
            tag = f"a note of {part.path}" if unread else of  # (an unread note's ranks are renumbered already)
            left_out = _LEFT_OUT.search(note) if not unread else None
            rank = int(left_out.group(1)) + part.shift if left_out else None
            if unread and supplied:
                shown = (f"{note} ({tag}; the merged store holds rank{'s' if len(supplied) > 1 else ''} "
                         f"{rank_ranges(supplied)}, from {other.path})")
            elif rank in other.held:
                shown = f"{note} ({tag}; the merged store holds rank {rank}, from {other.path})"
            else:
                tagged = _TAGGED.search(note) and not (part.shift and not unread)
                shown = note if note in both or tagged else f"{note} ({tag})"
            if shown not in kept:
                kept.append(shown)
    left = still_unfiled([(n, part.shift) for part, notes in zip((first, second), notes_of, strict=True)
                          for n in notes], held, run["world_size"], run.get("missing_nodes"))
    return [*kept, *([left] if left else [])]


def merged_uncategorised(first: Any, second: Any) -> list[dict]:
    """The merged store's ``uncategorised`` entry (the events of raw categories no rule knew, one row per format and
    raw category: ``info``'s ``uncategorised:`` line) from the two stores' entries: every row of either, a row both
    carry once (the same entry: two imports of exports of one store's ranks each carry the whole store's, as they
    carry its note, which the merged notes keep once too), in the first's order then the second's; rows that are not
    tables (a damaged manifest's) are left out."""
    rows = [[r for r in entry if isinstance(r, dict)] if isinstance(entry, list) else [] for entry in (first, second)]
    merged = list(rows[0])
    unmatched = list(rows[0])  # (a row the second carries twice and the first once is kept twice)
    for row in rows[1]:
        if row in unmatched:
            unmatched.remove(row)
        else:
            merged.append(row)
    return merged


def merged_world_size(first: MergedPart, second: MergedPart) -> tuple[int, str | None]:
    """The merged store's world size and, where the stores do not declare one and the same that covers every rank
    held, the note saying which it is and why."""
    top = max([*first.held, *second.held], default=-1) + 1
    world = max(first.declared, second.declared, top)
    if first.declared == second.declared == world:
        return world, None
    said = "; ".join(f"{p.path}'s run says {p.declared}" if p.said else f"{p.path}'s run gives none (it lists "
                     f"{p.declared} ranks)" for p in (first, second))
    beyond = f", and the ranks held reach rank {top - 1}" if top > max(first.declared, second.declared) else ""
    return world, (f"world size {world}: the merged stores do not declare the same one ({said}{beyond}); the "
                   "merged store takes the largest")


def merged_clock(first: MergedPart, second: MergedPart) -> tuple[dict, str | None]:
    """The merged store's clock entry: each rank's entries from the store that held it (renumbered with it), the
    nodes' of both; where the stores' clocks were aligned differently (method or reference rank), the method by
    rank, no reference rank, and the note saying so."""
    clocks = [p.manifest.get("clock") if isinstance(p.manifest.get("clock"), dict) else {} for p in (first, second)]
    clock = {k: v for k, v in clocks[0].items() if k not in _CLOCK_BY_RANK and k != "unaligned_ranks"}
    for part, source in zip((first, second), clocks, strict=True):
        for key in _CLOCK_BY_RANK:
            table = source.get(key)
            if isinstance(table, dict):
                taken = {str(r + part.shift): table[str(r)] for r in part.ranks if str(r) in table}
                clock.setdefault(key, {}).update(taken)
        for key in _CLOCK_BY_NODE:
            if isinstance(source.get(key), dict):
                clock[key] = {**source[key], **clock.get(key, {})}
        for key in ("node_method", "framework_method"):
            if key in source and key not in clock:
                clock[key] = source[key]
        unaligned = source.get("unaligned_ranks")
        if isinstance(unaligned, list):
            clock.setdefault("unaligned_ranks", []).extend(r + part.shift for r in unaligned
                                                           if type(r) is int and r in part.ranks)
    methods = [c.get("framework_method") for c in clocks]
    if None not in methods and methods[0] != methods[1]:  # each names its ranks: 'ranks [0, 1]: ...'
        clock["framework_method"] = f"{methods[0]}; {methods[1]}"
    uncertainties = [v for key in ("uncertainty_ns", "finalize_uncertainty_ns")
                     for v in (clock.get(key) or {}).values() if type(v) is int]
    if any("max_uncertainty_ns" in c for c in clocks):
        clock["max_uncertainty_ns"] = max(uncertainties, default=0)
    matched = [c.get("matched_messages") for c in clocks]
    if all(type(m) is int for m in matched):  # the messages of both stores' alignments
        clock["matched_messages"] = sum(matched)
    else:  # (not the first's alone: they aligned its ranks only)
        clock.pop("matched_messages", None)
    references = [(c.get("method"), c.get("reference_rank")) for c in clocks]
    if references[0] == references[1]:
        return clock, None
    from ddltrace.store import rank_ranges

    ways = [f"ranks {rank_ranges(p.held)}: {method or 'not recorded'}" + (f", onto rank {ref}'s clock"
                                                                       if ref is not None else "")
            for p, (method, ref) in zip((first, second), references, strict=True)]
    clock["method"] = "not one alignment: " + "; ".join(ways)
    clock.pop("reference_rank", None)
    return clock, (f"clocks not aligned to each other: {first.path} and {second.path} were put on their clocks "
                   f"differently ({'; '.join(ways)}); the times of ranks {rank_ranges(first.held)} and those of ranks "
                   f"{rank_ranges(second.held)} are not on one clock")


#: The option of ``ddltrace merge`` that merges stores though they look like two runs (:func:`not_one_run`).
AS_ONE_RUN = "--as-one-run"
#: The fields of the ``workload`` entries that may differ between parts of one run: the ground truth's path, relative
#: to the store that holds the entry (two imports of one run's exports in different folders name it differently where
#: the file is not on this machine); the merged store's note still names it (ddltrace/workload_entry.py).
_PER_STORE_FIELDS = ("ground_truth",)


def not_one_run(first: Any, second: Any, renumbered: bool = False) -> list[str]:
    """What says that the stores ``first`` and ``second`` (:class:`~ddltrace.store.TraceStore`) are of two runs, not
    parts of one (a text each, the second's figure before the first's; none for parts of one run):

    - their world sizes (``run.world_size``) differ, where each is the run's own: a store whose run records its
      command (``ddltrace run``, an import of its export) or whose world reaches past its ranks; a world equal to the
      ranks a store holds (an import of files that do not say it) may be counted from them only. One store's run's
      own world that the other's ranks reach past says so too (unless ``renumbered``: the ranks are shifted);
    - their runs' commands (``run.command``, compared word by word) differ, where both record one (not an import's
      own ``ddltrace import FILES``: two imports of one run's files, a rank each, name different files);
    - their job configurations (the ``workload`` entries, :func:`~ddltrace.workload_entry.merged_workload`'s
      comparison, but for the ground truth's path, :data:`_PER_STORE_FIELDS`) differ, where both record one.

    The parts of one run (the exports of some of its ranks imported, a node's part) share all three."""
    said = []
    worlds = [_own_world(store) for store in (first, second)]
    (world_a, own_a), (world_b, own_b) = worlds
    if own_a and own_b and world_a != world_b:
        said.append(f"world size {world_b} vs {world_a}")
    elif not renumbered:
        for (world, own), store, other in (((world_a, own_a), first, second), ((world_b, own_b), second, first)):
            past = [r for r in other.ranks if world is not None and r >= world]
            if own and past:
                said.append(f"{other.path} holds rank {past[-1]}, past {store.path}'s world of {world}")
                break
    commands = [_run_command(store) for store in (first, second)]
    if all(commands) and commands[0] != commands[1]:
        shortest = min(map(len, commands))  # (the words past it differ from none: the other's end)
        at = next((i for i in range(shortest) if commands[0][i] != commands[1][i]), shortest)
        words = [c[at] if at < len(c) else "(end)" for c in commands]
        said.append(f"command word {at + 1} {_shown(words[1])} vs {_shown(words[0])}")
    entries = [store.manifest.get("workload") for store in (first, second)]
    if None not in entries:
        from ddltrace.workload_entry import _differing

        bare = [{k: v for k, v in e.items() if k not in _PER_STORE_FIELDS} if isinstance(e, dict) else e
                for e in entries]
        # the worker count and the ranks first (what a user tells runs by), then the others by name
        fields = sorted(_differing(*bare), key=lambda f: (f.rsplit(".", 1)[-1] not in ("workers", "ranks"), f))
        if fields:
            shown = [f"{f} {_shown(_field(bare[1], f))} vs {_shown(_field(bare[0], f))}" for f in fields[:3]]
            more = f", and {len(fields) - 3} more" if len(fields) > 3 else ""
            said.append(f"job configuration {', '.join(shown)}{more}")
    return said


def not_one_run_text(first: Any, second: Any, evidence: list[str]) -> str:
    """The one line refusing to merge ``second`` into ``first``'s run, with the ``evidence`` of :func:`not_one_run`."""
    return (f"{second.path}: not a part of {first.path}'s run (its vs {first.path}'s: {'; '.join(evidence)}): merge "
            f"joins the parts of one run; {AS_ONE_RUN} merges them anyway, where you know they are one")


def _own_world(store: Any) -> tuple[int | None, bool]:
    """The world size ``store``'s run records (None where it records none that is one) and whether it is the run's
    own (see :func:`not_one_run`), not possibly counted from the ranks the store holds."""
    said = store.run.get("world_size")
    if type(said) is not int or said < 1:
        return None, False
    return said, bool(_run_command(store)) or said > max(store.ranks, default=-1) + 1


def _run_command(store: Any) -> list[str]:
    """The words of the command ``store``'s run ran (``run.command``), none where it records none or only the
    ``ddltrace import`` that made it (an import of files that do not say the job's command; one of ddltrace's own
    export has the run's)."""
    words = _words(store.run.get("command"))
    return [] if "imported_files" in store.run and words[:2] == ["ddltrace", "import"] else words


def _words(command: Any) -> list[str]:
    """``command`` (a text or a list of words) as words; none where it is neither or cannot be split."""
    import shlex

    if isinstance(command, list):
        return [str(w) for w in command]
    if not isinstance(command, str):
        return []
    try:
        return shlex.split(command)
    except ValueError:  # unbalanced quotes: compared as one word
        return [command]


def _field(entry: Any, dotted: str) -> Any:
    """The value at ``dotted`` (``config.workers``) in ``entry`` (None where it has none; the entry itself for
    ``workload``, the name of an entry that is not a mapping)."""
    if not isinstance(entry, dict):
        return entry
    for key in dotted.split("."):
        entry = entry.get(key) if isinstance(entry, dict) else None
    return entry


def _shown(value: Any) -> str:
    """``value`` short, as JSON (at most 60 characters)."""
    import json

    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:28] + "..." + text[-29:]
