"""The commands a launch script runs, as bash would expand them, with the line each word came from.

Enough of bash for the scripts people launch training with (POSIX shell grammar, bash manual
§3.1.2 quoting, §3.5 expansions): comments, line continuations, single and double quotes, ``$NAME`` /
``${NAME}`` / ``${NAME:-default}`` / ``"${ARRAY[@]}"``, ``NAME=(...)`` arrays, word splitting of
unquoted expansions, ``export``, ``unset``, ``cd``, ``VAR=value cmd`` prefixes, redirections and
here-documents (dropped), and the separators ``;``, ``&&``, ``||``, ``|``, ``&`` and newlines.

What it cannot know it keeps visible rather than guessing: a variable the script never sets, or a
command substitution ``$(...)``, stays in the word as written and the word is marked ``unresolved``.
Control flow (``if``, ``for``) is not evaluated: each command inside is read once, in order.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from checks.errors import InputError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
# Reserved words that may open a line before the command they guard (bash manual §3.2.5).
_KEYWORDS = frozenset({"then", "do", "else", "elif", "if", "while", "until", "!", "{", "}", "fi", "done", "esac",
                       "time"})
_SEPARATORS = frozenset(";&|")
# A variable that doubles itself (A="$A$A", 40 times) expands to 2**40 characters: the expansions of one script
# are bounded, far above any launch script's (a few KiB), and so is the nesting of ${NAME:-default}.
MAX_EXPANDED_CHARS = 1_000_000
MAX_NESTING = 32
# The reader is Python, a few microseconds a character: a launch script, or a command line, is bounded far above
# real ones (a few KiB, a few hundred commands), so that any input is read in well under a second.
MAX_SCRIPT_CHARS = 128 * 1024
MAX_COMMANDS = 10_000
_PLAIN = re.compile(r"[^ \t\r\n;&|<>()\\'\"$`]+")  # characters a word holds as they are, outside quotes
_DOUBLE_QUOTED = re.compile(r"[^\"\\$`]+")  # and inside double quotes


class Word(NamedTuple):
    """One word of a command after expansion."""

    text: str
    line: int  # where the word's first character was written (inside a variable's definition, if it came from one)
    unresolved: bool = False  # holds an expansion the checker cannot perform
    lines: tuple[int, ...] = ()  # per character, where known


class Command(NamedTuple):
    """A simple command, expanded: its words, the environment it runs with and the directory it runs in."""

    words: tuple[Word, ...]
    line: int
    env: Mapping[str, Word]  # exported variables and the command's own NAME=value prefixes
    cwd: str | None  # None: the directory the script is started from


# --- lexing -----------------------------------------------------------------------------------------------------


class _Lit(NamedTuple):
    text: str
    lines: tuple[int, ...]  # one per character
    quoted: bool


class _Var(NamedTuple):
    name: str
    line: int
    quoted: bool
    default: _Raw | None = None  # ${NAME:-default}
    every: bool = False  # ${NAME[@]} / ${NAME[*]}: every element of an array
    raw: str = ""  # as written, kept when it cannot be expanded


class _Sub(NamedTuple):  # $(...) or `...`, $1, $@: not evaluated
    raw: str
    line: int


class _Array(NamedTuple):  # NAME=( ... )
    items: tuple[_Raw, ...]


_Segment = _Lit | _Var | _Sub | _Array


class _Raw:
    def __init__(self, segments: list[_Segment] | None = None) -> None:
        self.segments: list[_Segment] = segments if segments is not None else []
        # The literal being read: kept in lists and made a _Lit when something else follows (rebuilding the _Lit
        # for every character made a long word quadratic: a 200 KB word took a minute).
        self._chars: list[str] = []
        self._lines: list[int] = []
        self._quoted = False

    def add(self, segment: _Segment) -> None:
        self.flush()
        self.segments.append(segment)

    def char(self, ch: str, line: int, *, quoted: bool) -> None:
        self.chars(ch, [line], quoted=quoted)

    def chars(self, text: str, lines: list[int], *, quoted: bool) -> None:
        """More literal text, a line per character: it joins the literal before it when both are quoted or both
        are not."""
        if self._chars and self._quoted != quoted:
            self.flush()
        if not self._chars:
            last = self.segments[-1] if self.segments else None
            if isinstance(last, _Lit) and last.quoted == quoted:  # "" then a character: one literal
                self.segments.pop()
                self._chars, self._lines = list(last.text), list(last.lines if last.text else ())
            self._quoted = quoted
        self._chars.append(text)
        self._lines += lines

    def flush(self) -> None:
        if self._chars:
            self.segments.append(_Lit("".join(self._chars), tuple(self._lines), self._quoted))
            self._chars, self._lines = [], []

    @property
    def line(self) -> int:
        self.flush()
        first = self.segments[0]
        if isinstance(first, _Lit):
            return first.lines[0]
        if isinstance(first, _Array):
            return first.items[0].line if first.items else 0
        return first.line

    def literal_prefix(self) -> str:
        """The unquoted literal text the word starts with (where an assignment's NAME= is)."""
        self.flush()
        first = self.segments[0] if self.segments else None
        return first.text if isinstance(first, _Lit) and not first.quoted else ""


class _Lexer:
    def __init__(self, text: str, where: str, first_line: int = 1, depth: int = 0) -> None:
        self.text, self.where, self.i, self.line = text, where, 0, first_line
        self.heredocs: list[str] = []
        self.depth = depth  # how many ${NAME:-...} defaults this text is inside

    def error(self, message: str, line: int | None = None) -> InputError:
        return InputError(f"{self.where}:{self.line if line is None else line}", message)

    def peek(self, offset: int = 0) -> str:
        j = self.i + offset
        return self.text[j] if j < len(self.text) else ""

    def advance(self) -> str:
        ch = self.text[self.i]
        self.i += 1
        if ch == "\n":
            self.line += 1
        return ch

    def commands(self) -> Iterator[tuple[int, list[_Raw]]]:
        words: list[_Raw] = []
        start = self.line
        skip_target = False
        while self.i < len(self.text):
            ch = self.peek()
            if ch == "\\" and self.peek(1) == "\n":
                self.advance(), self.advance()
                continue
            if ch in " \t\r":
                self.advance()
                continue
            if ch == "#":
                while self.i < len(self.text) and self.peek() != "\n":
                    self.advance()
                continue
            if ch == "\n" or ch in _SEPARATORS:
                self.advance()
                if ch == "\n":
                    self._skip_heredocs()
                if words:
                    yield start, words
                words, start = [], self.line
                continue
            if ch in "()":  # a subshell or function body: its commands are read like any other
                self.advance()
                continue
            if ch in "<>":
                if words and self._is_fd(words[-1]):
                    words.pop()
                skip_target = self._redirection()
                continue
            word = self.word()
            if skip_target:
                skip_target = False
                continue
            if not words:
                start = word.line
            words.append(word)
        if words:
            yield start, words

    @staticmethod
    def _is_fd(raw: _Raw) -> bool:
        return len(raw.segments) == 1 and isinstance(raw.segments[0], _Lit) and raw.segments[0].text.isdigit() \
            and not raw.segments[0].quoted

    def _redirection(self) -> bool:
        """Read a redirection operator; True when its target word follows (and is to be dropped)."""
        op = ""
        while self.peek() in ("<", ">", "|") and len(op) < 3:
            op += self.advance()
        if self.peek() == "&":  # >&2, 2>&1: the target is the descriptor that follows
            self.advance()
        if op.startswith("<<") and op != "<<<":
            while self.peek() in " \t":
                self.advance()
            strip = self.peek() == "-"
            if strip:
                self.advance()
            delimiter = self.word()
            self.heredocs.append("".join(s.text for s in delimiter.segments if isinstance(s, _Lit)))
            return False
        return True

    def _skip_heredocs(self) -> None:
        while self.heredocs:
            end = self.heredocs.pop(0)
            while self.i < len(self.text):
                newline = self.text.find("\n", self.i)
                stop = len(self.text) if newline < 0 else newline
                body_line = self.text[self.i:stop]
                while self.i < stop:
                    self.advance()
                if self.i < len(self.text):
                    self.advance()
                if body_line.strip() == end:
                    break

    def word(self) -> _Raw:
        raw = _Raw()
        while self.i < len(self.text):
            ch = self.peek()
            if ch in " \t\r\n" or ch in _SEPARATORS or ch in "<>()":
                if ch == "(" and _ASSIGNMENT.fullmatch(raw.literal_prefix()) and len(raw.segments) == 1:
                    self.advance()
                    raw.add(self._array())
                    continue
                break
            if ch == "\\":
                self.advance()
                if self.peek() == "\n":
                    self.advance()
                    continue
                if self.i < len(self.text):
                    line = self.line
                    self._lit(raw, self.advance(), line, quoted=True)
                continue
            if ch == "'":
                self.advance()
                start = self.line
                close = self.text.find("'", self.i)
                if close < 0:
                    raise self.error("unterminated single quote", start)
                text, lines = self._run(close)
                self.advance()
                raw.add(_Lit(text, tuple(lines) or (start,), quoted=True))
                if not text:
                    raw.add(_Lit("", (start,), quoted=True))
                continue
            if ch == '"':
                self._double(raw)
                continue
            if ch == "$":
                raw.add(self._dollar(quoted=False))
                continue
            if ch == "`":
                raw.add(self._backtick())
                continue
            plain = _PLAIN.match(self.text, self.i)  # a run of ordinary characters, read at once
            if plain:
                raw.chars(plain.group(), [self.line] * len(plain.group()), quoted=False)
                self.i = plain.end()
                continue
            line = self.line
            self._lit(raw, self.advance(), line, quoted=False)
        raw.flush()
        return raw

    def _run(self, end: int) -> tuple[str, list[int]]:
        """The text up to ``end`` and the line of each of its characters; the lexer moves past it."""
        text = self.text[self.i:end]
        if "\n" not in text:
            lines = [self.line] * len(text)
        else:
            lines = []
            for ch in text:
                lines.append(self.line)
                self.line += ch == "\n"
        self.i = end
        return text, lines

    @staticmethod
    def _lit(raw: _Raw, ch: str, line: int, *, quoted: bool) -> None:
        raw.char(ch, line, quoted=quoted)

    def _double(self, raw: _Raw) -> None:
        self.advance()
        start = self.line
        raw.add(_Lit("", (start,), quoted=True))  # "" is an (empty) word of its own
        while self.peek() != '"':
            ch = self.peek()
            if not ch:
                raise self.error("unterminated double quote", start)
            if ch == "\\" and self.peek(1) in ('"', "\\", "$", "`", "\n"):
                self.advance()
                escaped = self.advance()
                if escaped != "\n":  # a backslash-newline inside double quotes joins the lines
                    self._lit(raw, escaped, self.line, quoted=True)
                continue
            if ch == "$":
                raw.add(self._dollar(quoted=True))
                continue
            if ch == "`":
                raw.add(self._backtick())
                continue
            plain = _DOUBLE_QUOTED.match(self.text, self.i)
            if plain:
                raw.chars(*self._run(plain.end()), quoted=True)
                continue
            line = self.line
            self._lit(raw, self.advance(), line, quoted=True)
        self.advance()

    def _dollar(self, *, quoted: bool) -> _Segment:
        line, begin = self.line, self.i
        self.advance()
        ch = self.peek()
        if ch == "(":
            depth = 0
            while self.i < len(self.text):
                c = self.advance()
                depth += c == "("
                depth -= c == ")"
                if depth == 0:
                    break
            else:
                raise self.error("unterminated $(", line)
            return _Sub(self.text[begin:self.i], line)
        if ch == "{":
            close = self._matching_brace()
            inner = self.text[self.i + 1:close]
            while self.i <= close:
                self.advance()
            raw_text = self.text[begin:self.i]
            match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(\[[@*]\])?(?::?-(.*))?", inner, re.S)
            if match is None:  # ${#X}, ${X/a/b}, ${X:1}: not modelled
                return _Sub(raw_text, line)
            default = None
            if match.group(3) is not None:
                if self.depth >= MAX_NESTING:  # each default is read by a lexer of its own, recursively
                    raise self.error(f"${{NAME:-default}} nested deeper than {MAX_NESTING} levels is refused", line)
                default = _Lexer(match.group(3), self.where, line, self.depth + 1).word()
            return _Var(match.group(1), line, quoted, default, bool(match.group(2)), raw_text)
        name = _NAME.match(self.text, self.i)
        if name:
            while self.i < name.end():
                self.advance()
            return _Var(name.group(0), line, quoted, raw=self.text[begin:self.i])
        if ch and (ch.isdigit() or ch in "@*#?$!-"):
            self.advance()
            return _Sub(self.text[begin:self.i], line)
        return _Lit("$", (line,), quoted)

    def _matching_brace(self) -> int:
        depth, j = 0, self.i
        while j < len(self.text):
            depth += self.text[j] == "{"
            depth -= self.text[j] == "}"
            if depth == 0:
                return j
            j += 1
        raise self.error("unterminated ${")

    def _backtick(self) -> _Sub:
        line, begin = self.line, self.i
        self.advance()
        while self.peek() != "`":
            if not self.peek():
                raise self.error("unterminated backquote", line)
            self.advance()
        self.advance()
        return _Sub(self.text[begin:self.i], line)

    def _array(self) -> _Array:
        items: list[_Raw] = []
        opened = self.line
        while True:
            ch = self.peek()
            if not ch:
                raise self.error("unterminated array", opened)
            if ch == ")":
                self.advance()
                return _Array(tuple(items))
            if ch in " \t\r\n":
                self.advance()
                continue
            if ch == "\\" and self.peek(1) == "\n":
                self.advance(), self.advance()
                continue
            if ch == "#":
                while self.peek() and self.peek() != "\n":
                    self.advance()
                continue
            items.append(self.word())


# --- expansion --------------------------------------------------------------------------------------------------


class _Value(NamedTuple):
    """A variable: a string, or an array's elements."""

    items: tuple[Word, ...]
    array: bool = False


class _Fields:
    """Words being built from segments; unquoted expansions split into several (bash manual §3.5.7)."""

    def __init__(self) -> None:
        self.done: list[Word] = []
        self.text: list[str] = []
        self.lines: list[int] = []
        self.quoted = False
        self.unresolved = False
        self.anchor = 0

    def add(self, text: str, lines: tuple[int, ...], *, quoted: bool = False, unresolved: bool = False) -> None:
        if not text and lines and not self.lines:  # "" is a word of its own, on the line it is written
            self.anchor = lines[0]
        self.text.append(text)
        self.lines += lines[:len(text)] + (lines[-1:] * (len(text) - len(lines)) if lines else ())
        self.quoted |= quoted
        self.unresolved |= unresolved

    def split(self) -> None:
        if (self.text and "".join(self.text)) or self.quoted:
            self.done.append(Word("".join(self.text), self.lines[0] if self.lines else self.anchor, self.unresolved,
                                  tuple(self.lines)))
        self.text, self.lines, self.quoted, self.unresolved, self.anchor = [], [], False, False, 0

    def add_split(self, word: Word) -> None:
        value = word.text
        lines = word.lines or (word.line,) * len(value)
        if not value.split():
            return
        if value[:1].isspace():
            self.split()
        start = None
        for index, ch in enumerate(value + " "):
            if not ch.isspace() and start is None:
                start = index
            elif ch.isspace() and start is not None:
                if self.text and start > 0:
                    self.split()
                self.add(value[start:index], tuple(lines[start:index]), unresolved=word.unresolved)
                start = None
        if value[-1:].isspace():
            self.split()

    def result(self) -> list[Word]:
        self.split()
        return self.done


class Shell:
    """Walks a script's commands in order, keeping its variables, exports and directory."""

    def __init__(self, where: str, environment: Mapping[str, str] | None = None) -> None:
        self.where = where
        self.variables: dict[str, _Value] = {}
        self.exported: set[str] = set()
        self.cwd: str | None = None
        self.expanded = 0  # characters variables have expanded to so far
        for name, value in (environment or {}).items():
            self.variables[name] = _Value((Word(value, 0),))  # from --env: no line of the script
            self.exported.add(name)

    def run(self, text: str, first_line: int = 1) -> Iterator[Command]:
        if len(text) > MAX_SCRIPT_CHARS:
            raise InputError(self.where, f"a launch script of {len(text):,} characters is refused; the checker reads "
                                         f"up to {MAX_SCRIPT_CHARS:,} (launch scripts are a few KiB)")
        for count, (line, raws) in enumerate(_Lexer(text, self.where, first_line).commands(), start=1):
            if count > MAX_COMMANDS:
                raise InputError(f"{self.where}:{line}", f"more than {MAX_COMMANDS:,} commands in one launch script "
                                                         "are refused")
            command = self._command(line, raws)
            if command is not None:
                yield command

    def _command(self, line: int, raws: list[_Raw]) -> Command | None:
        while raws and self._keyword(raws[0]):
            raws = raws[1:]
        prefix: dict[str, Word] = {}
        while raws and (match := _ASSIGNMENT.match(raws[0].literal_prefix())):
            value = self._assigned(raws[0], len(match.group(0)))
            if len(raws) == 1:
                self.variables[match.group(1)] = value
                return None
            prefix[match.group(1)] = value.items[0] if value.items else Word("", raws[0].line)
            raws = raws[1:]
        if not raws:
            return None
        words = [w for raw in raws for w in self.expand(raw)]
        if not words:
            return None
        head = words[0].text
        if head in ("export", "declare", "typeset", "readonly", "local") and not prefix:
            self._export(raws[1:], exported=head == "export" or any(w.text == "-x" for w in words[1:]))
            return None
        if head == "unset":
            for w in words[1:]:
                self.variables.pop(w.text, None)
                self.exported.discard(w.text)
            return None
        if head == "cd" and not prefix:
            target = next((w for w in words[1:] if not w.text.startswith("-")), None)
            if target is None or target.unresolved:
                self.cwd = None if target is None else target.text
            else:
                self.cwd = posixpath.normpath(posixpath.join(self.cwd or "", target.text)) if self.cwd or \
                    not target.text.startswith("/") else target.text
            return None
        env = {name: self.variables[name].items[0] for name in sorted(self.exported)
               if name in self.variables and self.variables[name].items}
        env.update(prefix)
        return Command(tuple(words), line, env, self.cwd)

    def _keyword(self, raw: _Raw) -> bool:
        if len(raw.segments) != 1 or not isinstance(raw.segments[0], _Lit) or raw.segments[0].quoted:
            return False
        return raw.segments[0].text in _KEYWORDS

    def _export(self, raws: list[_Raw], *, exported: bool) -> None:
        for raw in raws:
            prefix = raw.literal_prefix()
            if prefix.startswith("-"):
                continue
            match = _ASSIGNMENT.match(prefix)
            if match:
                self.variables[match.group(1)] = self._assigned(raw, len(match.group(0)))
                name = match.group(1)
            else:
                name = prefix
            if exported and _NAME.fullmatch(name):
                self.exported.add(name)

    def _assigned(self, raw: _Raw, cut: int) -> _Value:
        """The value of ``NAME=...``: no word splitting (bash manual §3.4), except an array's elements."""
        first = raw.segments[0]
        assert isinstance(first, _Lit)
        rest = _Raw([_Lit(first.text[cut:], first.lines[cut:] or first.lines[-1:], first.quoted), *raw.segments[1:]])
        if len(rest.segments) == 2 and isinstance(rest.segments[1], _Array):
            return _Value(tuple(w for item in rest.segments[1].items for w in self.expand(item)), array=True)
        fields = _Fields()
        fields.quoted = True  # NAME= holds the empty string
        for segment in rest.segments:
            self._segment(segment, fields, split=False)
        words = fields.result()
        return _Value(tuple(words[:1]) or (Word("", raw.line),))

    def expand(self, raw: _Raw) -> list[Word]:
        fields = _Fields()
        for segment in raw.segments:
            self._segment(segment, fields, split=True)
        return fields.result()

    def _segment(self, segment: _Segment, fields: _Fields, *, split: bool) -> None:
        if isinstance(segment, _Lit):
            if segment.text or segment.quoted:
                fields.add(segment.text, segment.lines, quoted=segment.quoted)
            return
        if isinstance(segment, _Sub):
            fields.add(segment.raw, (segment.line,), unresolved=True)
            return
        if isinstance(segment, _Array):  # only after NAME=, handled by _assigned
            return
        value = self.variables.get(segment.name)
        if value is None or (segment.default is not None and not "".join(w.text for w in value.items)):
            if segment.default is not None:
                for default_segment in segment.default.segments:
                    self._segment(default_segment, fields, split=split and not segment.quoted)
                return
            fields.add(segment.raw, (segment.line,), unresolved=True)
            return
        items = value.items if segment.every or not value.array else value.items[:1]
        self.expanded += sum(len(item.text) for item in items)
        if self.expanded > MAX_EXPANDED_CHARS:
            raise InputError(f"{self.where}:{segment.line}", f"variables expand to more than {MAX_EXPANDED_CHARS:,} "
                             f"characters (${segment.name} doubles itself?); refusing to expand")
        for index, item in enumerate(items):
            if index:
                fields.split()
            if segment.quoted or not split:
                fields.add(item.text, item.lines or (item.line,), quoted=True, unresolved=item.unresolved)
            else:
                fields.add_split(item)


def commands(text: str, where: str, environment: Mapping[str, str] | None = None,
             first_line: int = 1) -> list[Command]:
    """Every simple command of a script, in order, expanded as bash would."""
    return list(Shell(where, environment).run(text, first_line))
