"""Which category each imported event falls in, by ordered regex rules kept in a data file.

The rules ship as ``categories.toml`` beside this module; a user file (``--rules``) is tried first, or alone
when it says ``replace = true``. Results are cached per (format, cat, name), so a trace with a million events
and a thousand distinct names costs a thousand regex searches. :meth:`Categorizer.explain` tells which rule
decided each name; :meth:`Categorizer.uncategorised` which raw categories no rule knew (those a rule marked
``uncategorised = true``, a format's catch-all, took, or that no rule matched).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ddltrace.arrow_timeline import CATEGORIES
from ddltrace.errors import DdltraceError

SHIPPED_RULES = "categories.toml"


@dataclass(frozen=True)
class Rule:
    """One rule: events of ``formats`` whose cat and name match go to ``category``."""

    id: str
    formats: tuple[str, ...]
    cat: re.Pattern | _OnFirstSearch | None
    name: re.Pattern | _OnFirstSearch | None
    category: str
    origin: str  # file the rule came from
    uncategorised: bool = False  # a catch-all for what no rule before it knew: its events are reported

    def matches(self, fmt: str, cat: str, name: str) -> bool:
        if "*" not in self.formats and fmt not in self.formats:
            return False
        if self.cat is not None and not self.cat.search(cat):
            return False
        return self.name is None or bool(self.name.search(name))


class _OnFirstSearch:
    """A regular expression compiled when first searched with: of the shipped rules, an import uses the few of its
    formats (compiling all 150 patterns would cost 20 ms of each import's start)."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self._compiled: re.Pattern | None = None

    def compile(self) -> re.Pattern:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern)
        return self._compiled

    def search(self, text: str) -> re.Match | None:
        return (self._compiled or self.compile()).search(text)


def _compile(pattern, where: str, checked: bool) -> re.Pattern | _OnFirstSearch | None:
    if pattern is None:
        return None
    if not isinstance(pattern, str):
        raise DdltraceError(f"{where}: pattern must be a string, not {type(pattern).__name__}")
    if checked:  # the shipped file, whose every pattern a test compiles
        return _OnFirstSearch(pattern)
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise DdltraceError(f"{where}: bad regular expression {pattern!r} ({exc})") from exc


def load_rules(text: str, origin: str, *, checked: bool = False) -> tuple[list[Rule], bool]:
    """Parse a rules file's text; returns (rules, replace). Raises DdltraceError naming the bad rule. The
    patterns of a ``checked`` file (the shipped rules) are compiled when first used, a user's at once (a bad
    one is named here)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DdltraceError(f"{origin}: not valid TOML ({exc})") from exc
    entries = data.get("rule", [])
    if not isinstance(entries, list):
        raise DdltraceError(f"{origin}: 'rule' must be an array of tables ([[rule]])")
    rules = []
    for i, entry in enumerate(entries, start=1):
        where = f"{origin}: rule {i} ({entry.get('id', 'no id')})"
        unknown = set(entry) - {"id", "formats", "cat", "name", "category", "uncategorised"}
        if unknown:
            raise DdltraceError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        category = entry.get("category")
        if category not in CATEGORIES:
            raise DdltraceError(f"{where}: category {category!r} is not one of {', '.join(CATEGORIES)}")
        flag = entry.get("uncategorised", False)
        if not isinstance(flag, bool):
            raise DdltraceError(f"{where}: uncategorised must be true or false, not {flag!r}")
        formats = entry.get("formats", ["*"])
        if isinstance(formats, str):
            formats = [formats]
        rules.append(Rule(id=str(entry.get("id", f"rule-{i}")), formats=tuple(formats),
                          cat=_compile(entry.get("cat"), where, checked),
                          name=_compile(entry.get("name"), where, checked),
                          category=category, origin=origin, uncategorised=flag))
    return rules, bool(data.get("replace", False))


def shipped_rules() -> list[Rule]:
    text = Path(__file__).with_name(SHIPPED_RULES).read_text()  # (importlib.resources: 1.6 ms more of each start)
    return load_rules(text, f"ddltrace/collectors/importers/{SHIPPED_RULES}", checked=True)[0]


class Categorizer:
    """Categorise (format, cat, name) by the first matching rule; remembers every decision for ``explain``."""

    def __init__(self, user_rules: str | Path | None = None):
        rules = shipped_rules()
        if user_rules is not None:
            path = Path(user_rules)
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise DdltraceError(f"{path}: cannot read rules file ({exc.strerror})") from exc
            except UnicodeDecodeError as exc:
                raise DdltraceError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                                    f"{exc.start})") from None
            mine, replace = load_rules(text, str(path))
            rules = mine if replace else mine + rules
        self.rules = rules
        self._by_format: dict[str, list[Rule]] = {}
        self.decisions: dict[tuple[str, str, str], Rule | None] = {}
        self.counts: dict[tuple[str, str, str], int] = {}

    def fresh(self) -> Categorizer:
        """A categorizer with the same rules and nothing decided yet (for one file read elsewhere)."""
        other = Categorizer.__new__(Categorizer)
        other.rules, other._by_format, other.decisions, other.counts = self.rules, {}, {}, {}
        return other

    def merge(self, other: Categorizer) -> None:
        """Take in what ``other`` (made by :meth:`fresh`) decided and counted."""
        for key, rule in other.decisions.items():
            self.decisions.setdefault(key, rule)
        for key, n in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + n

    def prepare(self, fmt: str) -> None:
        """Compile now the patterns of the rules that apply to ``fmt`` (else each is compiled when first searched
        with): ``ddltrace import`` does it while a large file's forked readers read."""
        for rule in self._rules_for(fmt):
            for pattern in (rule.cat, rule.name):
                if isinstance(pattern, _OnFirstSearch):
                    pattern.compile()

    def _rules_for(self, fmt: str) -> list[Rule]:
        rules = self._by_format.get(fmt)
        if rules is None:
            rules = [r for r in self.rules if "*" in r.formats or fmt in r.formats]
            self._by_format[fmt] = rules
        return rules

    def rule_for(self, fmt: str, cat: str, name: str) -> Rule | None:
        key = (fmt, cat, name)
        if key in self.decisions:
            return self.decisions[key]
        rule = next((r for r in self._rules_for(fmt) if r.matches(fmt, cat, name)), None)
        self.decisions[key] = rule
        return rule

    def category(self, fmt: str, cat: str, name: str, count: int = 1) -> str:
        """The category of one event kind; ``count`` events of it are tallied for ``explain``."""
        rule = self.rule_for(fmt, cat, name)
        key = (fmt, cat, name)
        self.counts[key] = self.counts.get(key, 0) + count
        return rule.category if rule is not None else "other"

    def uncategorised(self) -> list[dict]:
        """Events no rule knew, per format and raw category (cat): those a rule marked ``uncategorised`` took (or
        no rule matched), with how many events and distinct names; most events first."""
        totals: dict[tuple[str, str], list[int]] = {}
        for (fmt, cat, name), rule in self.decisions.items():
            if rule is None or rule.uncategorised:
                entry = totals.setdefault((fmt, cat), [0, 0])
                entry[0] += self.counts.get((fmt, cat, name), 0)
                entry[1] += 1
        rows = [{"format": fmt, "cat": cat, "events": n, "names": names}
                for (fmt, cat), (n, names) in totals.items() if n]
        return sorted(rows, key=lambda r: (-r["events"], r["format"], r["cat"]))

    def explain(self) -> list[dict]:
        """Every (format, cat, name) seen: its category, the rule that decided it, and how many events."""
        rows = []
        for (fmt, cat, name), rule in self.decisions.items():
            rows.append({"format": fmt, "cat": cat, "name": name,
                         "category": rule.category if rule else "other",
                         "rule": rule.id if rule else "(no rule matched)",
                         "rule_file": rule.origin if rule else "",
                         "events": self.counts.get((fmt, cat, name), 0)})
        rows.sort(key=lambda r: (r["format"], r["category"], -r["events"], r["name"]))
        return rows


def explain(names: list[str], fmt: str, cat: str = "", user_rules: str | Path | None = None) -> list[dict]:
    """Which category and rule each of ``names`` (events of format ``fmt``, category field ``cat``) gets."""
    categorizer = Categorizer(user_rules)
    for name in names:
        categorizer.category(fmt, cat, name)
    return categorizer.explain()


def uncategorised_text(rows: list[dict], listed: int = 8) -> str:
    """One line for :meth:`Categorizer.uncategorised`'s rows (as the manifest keeps them): how many events of
    which raw category no rule knew, filed as "other"."""
    rows = [r for r in rows if isinstance(r, dict)]  # as a (possibly edited) manifest holds them
    total = sum(int(r.get("events", 0)) for r in rows)
    parts = [f"{r.get('format')} cat {r.get('cat')!r}: {r.get('events')} events ({r.get('names')} names)"
             for r in rows[:listed]]
    if len(rows) > listed:
        parts.append(f"{len(rows) - listed} more cats: {sum(int(r.get('events', 0)) for r in rows[listed:])} events")
    kinds = f"{len(rows)} raw categor{'y' if len(rows) == 1 else 'ies'}"
    return (f"uncategorised: {total} events of {kinds} no rule knows, counted as other "
            f"(add a rule: --rules FILE) - " + "; ".join(parts))
