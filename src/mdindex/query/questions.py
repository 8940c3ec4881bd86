"""The questions `mdindex eval` asks, and the gold answers each is scored against.

A questions file (JSONL, or YAML: a list, or ``questions:`` holding one) has
one question each, with its gold answers written the way a person can::

    {"question": "How do I install it?", "path": "guide/setup.md"}
    {"question": "...", "path": "guide/setup.md", "quote": "pip install mdindex"}
    {"question": "...", "path": "guide/setup.md", "lines": [12, 20]}
    {"question": "...", "path": "guide/setup.md", "chars": [310, 745]}
    {"question": "...", "gold": [{"path": "a.md", "quote": "..."}, {"path": "b.md"}]}

``root`` names the root when there are several; ``id`` names the question
(else its line). The evalsets' own ``doc_path``/``char_start``/``char_end``
are read too. Each gold becomes a span of the document as indexed (a path
alone: the whole document); a hit answers a gold when it overlaps the span.
A path the live index does not hold, or a quote not in the file, is a
one-line error naming the question. Without a file, sampled sections'
heading paths are the questions (``heading_questions``).
"""

from __future__ import annotations

import bisect
import os
import random
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mdindex.config import Settings
from mdindex.documents.files import printable
from mdindex.documents.parsing import parse_document
from mdindex.documents.reading import decode, read_bytes
from mdindex.errors import ConfigError, MdindexError
from mdindex.index.search import Query
from mdindex.jsonfile import parse_json
from mdindex.outside import quoted
from mdindex.query.documents import indexed_documents, locate_document

# Each question is a search per version and mode: 2,000 of them, three modes and
# two versions are 12,000 searches, minutes; 10,000 were allowed, which is hours.
MAX_QUESTIONS = 2_000
MAX_FILE_BYTES = 4 << 20  # of a questions file (16 MB of YAML took 45 s and 2.9 GB)
MAX_QUOTE_CHARS = 1000  # a phrase: a 3,000-word quote took 3.4 s a question to match


@dataclass(frozen=True)
class Gold:
    """A span of a document, as indexed (characters, end excluded)."""

    root: str
    path: str
    start: int
    end: int

    def answered_by(self, hit: dict[str, Any]) -> bool:
        return (
            hit.get("root") == self.root
            and hit.get("doc_path") == self.path
            and int(hit.get("char_start", 0)) < self.end
            and self.start < int(hit.get("char_end", 0))
        )


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    gold: tuple[Gold, ...]


# -- questions ------------------------------------------------------------------


def chosen_questions(
    settings: Settings, questions: str | Path | None, headings: int | None, seed: int
) -> list[Question]:
    """`mdindex eval`'s questions: those of the file ``questions``, or ``headings``
    sections' heading paths, picked with ``seed`` (one of them: ``eval_args``)."""
    from mdindex.versions.catalog import require_indexed

    settings.require_roots()
    require_indexed(settings)  # not "no documents of the roots given", on a typo
    if questions is not None:
        return load_questions(settings, Path(questions))
    assert headings is not None
    if not 1 <= headings <= MAX_QUESTIONS:
        raise ConfigError(f"eval: --headings must be 1 to {MAX_QUESTIONS}")
    asked = heading_questions(settings, headings, seed)
    if not asked:
        raise ConfigError("eval: the live index holds no sections with headings")
    return asked


def load_questions(settings: Settings, path: Path) -> list[Question]:
    """The questions of a file, each gold checked against the live index and
    the file as it is now; ConfigError (one line naming the question) if not."""
    shown = printable(str(path))
    try:
        # O_NONBLOCK: a FIFO named questions.jsonl cannot hang the open; fstat refuses it
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ConfigError(f"eval: {shown} is not a regular file")
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"eval: cannot read {shown}: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"eval: {shown} is over {MAX_FILE_BYTES >> 20} MB")
    try:
        raw = decode(data)
    except MdindexError as exc:
        raise ConfigError(f"eval: cannot read {shown}: {exc}") from None
    items = _items(raw, path, shown)
    if not items:
        raise ConfigError(f"eval: {shown} holds no questions")
    if len(items) > MAX_QUESTIONS:
        raise ConfigError(f"eval: {shown} holds over {MAX_QUESTIONS} questions")
    texts = _Texts(settings)
    return [_question(n, item, texts) for n, item in items]


def _items(raw: str, path: Path, shown: str) -> list[tuple[str, Any]]:
    """(where, item) of each question: its line in JSONL, its place in YAML."""
    if path.suffix.lower() in (".yaml", ".yml"):
        return _yaml_items(raw, shown)
    out = []
    # lines end at "\n" only: U+2028 and the like are text inside a JSON string
    for number, line in enumerate(raw.split("\n"), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:  # the bounded reader: nesting, NaN and size refused before parsing
            out.append((f"line {number}", parse_json(line, MAX_FILE_BYTES)))
        except ValueError as exc:  # a number of thousands of digits too
            raise ConfigError(f"eval: {shown} line {number}: {printable(str(exc)[:200])}") from None
        if len(out) > MAX_QUESTIONS:
            break
    return out


def _yaml_items(raw: str, shown: str) -> list[tuple[str, Any]]:
    # libyaml: 57 s for 100 KB of nested brackets in pure Python, refused at once here
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        # anchors and aliases are refused before anything is built (alias bombs)
        for event in yaml.parse(raw, Loader=loader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise ConfigError(f"eval: {shown} uses YAML anchors or aliases; write them out")
        data = yaml.load(raw, Loader=loader)  # a safe loader
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"eval: {shown} is not valid YAML: {printable(first[:200])}") from None
    except (ValueError, RecursionError):  # a number of thousands of digits; nesting
        raise ConfigError(f"eval: {shown} is nested or sized beyond reason") from None
    if isinstance(data, dict):
        data = data.get("questions")
    if not isinstance(data, list):
        raise ConfigError(f"eval: {shown} must hold a list of questions (or questions: [...])")
    return [(f"question {i + 1}", item) for i, item in enumerate(data)]


def _question(where: str, item: Any, texts: _Texts) -> Question:
    if not isinstance(item, dict):
        raise ConfigError(f"eval: {where}: a question is a mapping with question and path")
    given = item.get("id")
    qid = printable(str(given)[:80]) if given not in (None, "") else where
    name = f"eval: question {qid}" if given not in (None, "") else f"eval: {where}"
    text = item.get("question")
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{name}: no question text")
    try:
        Query(text)  # what search will be given: its length, NULs, lone surrogates
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None
    golds = item.get("gold", [item])
    if not isinstance(golds, list) or not golds:
        raise ConfigError(f"{name}: gold must be a list of answers")
    try:
        return Question(qid, text, tuple(_gold(g, texts) for g in golds))
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _gold(item: Any, texts: _Texts) -> Gold:
    if not isinstance(item, dict):
        raise ValueError("each gold answer is a mapping with a path")
    path = item.get("path", item.get("doc_path"))
    if not isinstance(path, str) or not path:
        raise ValueError("a gold answer has no path")
    root = item.get("root")
    if root is not None and not isinstance(root, str):
        raise ValueError("root must be a root's label")
    root, text = texts.get(root, path)
    shown = f"{root}:{printable(path[:200])}"
    if "quote" in item:
        quote = item["quote"]
        if not isinstance(quote, str) or not quote.strip():
            raise ValueError("quote must be a phrase of the file")
        if len(quote) > MAX_QUOTE_CHARS:
            raise ValueError(f"quote is over {MAX_QUOTE_CHARS} characters; give lines instead")
        # the words in order, any whitespace between them (a quote may be re-wrapped)
        found = texts.find(root, path, " ".join(quote.split()))
        if found is None:
            raise ValueError(f"quote {quoted(printable(quote))} is not in {shown}")
        return Gold(root, path, *found)
    if "lines" in item:
        first, last = _pair(item["lines"], "lines")
        starts = texts.line_starts(root, path)
        if not 1 <= first <= last <= len(starts):
            raise ValueError(f"lines {first}-{last} are not within 1-{len(starts)} of {shown}")
        end = starts[last] if last < len(starts) else len(text)
        return Gold(root, path, starts[first - 1], end)
    if "chars" in item or "char_start" in item:
        start, end = _pair(
            item.get("chars", [item.get("char_start"), item.get("char_end")]), "chars"
        )
        if not 0 <= start < end <= len(text):
            raise ValueError(f"chars {start}-{end} are not within 0-{len(text)} of {shown}")
        return Gold(root, path, start, end)
    return Gold(root, path, 0, len(text))


def _pair(value: Any, what: str) -> tuple[int, int]:
    ok = isinstance(value, list | tuple) and len(value) == 2
    if not ok or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"{what} must be two whole numbers, [first, last]")
    return int(value[0]), int(value[1])


def _squeezed(text: str) -> tuple[str, list[int], list[int]]:
    """The text with each whitespace run one space; and, for the runs longer than
    one character, where each starts in it and the characters dropped up to and
    including it (to map a position back)."""
    starts, dropped, total = [], [0], 0
    for m in re.finditer(r"\s{2,}", text):
        starts.append(m.start() - total)
        total += m.end() - m.start() - 1
        dropped.append(total)
    return re.sub(r"\s+", " ", text), starts, dropped


class _Texts:
    """Indexed documents' texts, each read once, only through the checks the MCP
    ``read`` tool uses (inside the roots, the path filter, indexed)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.labels = [r.label for r in settings.root_list()]
        self.cache: dict[tuple[str, str], str] = {}
        self.lines: dict[tuple[str, str], list[int]] = {}  # where each line starts
        self.squeezed: dict[tuple[str, str], tuple[str, list[int], list[int]]] = {}

    def get(self, root: str | None, path: str) -> tuple[str, str]:
        if root is None:
            if len(self.labels) != 1:
                shown = printable(path[:200])
                raise ValueError(f"{shown} needs a root (one of {', '.join(self.labels)})")
            root = self.labels[0]
        key = (root, path)
        if key not in self.cache:
            try:
                ref = locate_document(self.settings, root, path)
                self.cache[key] = decode(read_bytes(ref.path, self.settings.max_file_bytes, ref))
            except MdindexError as exc:
                raise ValueError(f"{root}:{printable(path[:200])}: {exc}") from None
        return root, self.cache[key]

    def line_starts(self, root: str, path: str) -> list[int]:
        """Where each line of a document starts, made once per document (each
        `lines` answer made it again: 2,000 answers, 2,000 passes over 5 MB)."""
        key = (root, path)
        if key not in self.lines:
            text = self.cache[key]
            starts = [0] + [m.end() for m in re.finditer("\n", text)]
            if starts[-1] == len(text):  # a last newline ends the last line, no empty one after
                starts.pop()
            self.lines[key] = starts
        return self.lines[key]

    def find(self, root: str, path: str, words: str) -> tuple[int, int] | None:
        """The span of ``words`` (single-spaced) in a document, whatever whitespace
        runs between them there: a plain search of the text with its runs made
        single spaces (a regex of the words took 21 s on 5 MB, backtracking)."""
        key = (root, path)
        if key not in self.squeezed:
            self.squeezed[key] = _squeezed(self.cache[key])
        squeezed, starts, dropped = self.squeezed[key]
        at = squeezed.find(words)
        if at < 0:
            return None
        last = at + len(words) - 1  # the last word's last character: not whitespace
        # a position past a run's one space is later by what the runs before it dropped
        return at + dropped[bisect.bisect_left(starts, at)], last + dropped[
            bisect.bisect_left(starts, last)
        ] + 1


def heading_questions(settings: Settings, sample: int, seed: int) -> list[Question]:
    """Sampled sections' heading paths as questions, each section its gold: a
    rough figure for any corpus, without writing questions. One section of
    each of ``sample`` documents drawn at random (seeded), so only those are
    read; more sections of them when the index holds fewer documents."""
    texts = _Texts(settings)
    documents = [(r, p) for r, p in indexed_documents(settings, -1) if r in texts.labels]
    if not documents:
        labels = ", ".join(texts.labels)
        raise ConfigError(
            f"eval --headings: the live index holds no documents of the roots given ({labels}); "
            "give the roots it was built from"
        )
    rng = random.Random(seed)
    rng.shuffle(documents)
    chosen: list[tuple[str, str, int, int, tuple[str, ...]]] = []
    spare: list[tuple[str, str, int, int, tuple[str, ...]]] = []
    for root, path in documents:
        if len(chosen) >= sample:
            break
        try:
            root, text = texts.get(root, path)
        except ValueError:
            continue  # changed or gone since it was indexed
        heads = parse_document(text, path).headings
        sections = [
            (root, path, h.start, heads[i + 1].start if i + 1 < len(heads) else len(text), h.path)
            for i, h in enumerate(heads)
            if _askable(" ".join(h.path))  # not an empty heading, nor one over the query limit
        ]
        if sections:
            chosen.append(sections.pop(rng.randrange(len(sections))))
            spare.extend(sections)
    chosen += rng.sample(spare, min(len(spare), sample - len(chosen)))
    return [
        Question(f"{root}:{path}#{i}", " ".join(hp), (Gold(root, path, start, end),))
        for i, (root, path, start, end, hp) in enumerate(chosen)
    ]


def _askable(text: str) -> bool:
    try:
        Query(text)
    except ValueError:
        return False
    return True
