"""What a dataset, model or algorithm says about itself, read from its own docstring.

One convention everywhere (``list NAME``, the study checks, the registry test): the
docstring of the thing that takes a parameter (a dataset or model builder, an algorithm's
config class) holds an entry ``name: meaning`` for each parameter. An entry starts at the
beginning of a line or after "; " or ". "; several names may share one (``n / n_test:
...``, ``a, b and c: ...``) and a parenthesis may follow the names (``lr (traced): ...``).
It runs to the next entry (or any ``word:`` that starts a line after a finished sentence),
an aside such as "; static: ...", a blank line or the end of the docstring. Inside
parentheses nothing starts or ends an entry: ``mu: weight (0 = FedAvg; k: as FedAvg's)``
is one meaning (a paragraph whose brackets do not balance is read without this rule). The
one-line help is the docstring's first sentence (a period inside parentheses ends none).

    def swapped_labels(key, num_clients: int = 8, swap: float = 0.5):
        '''Two clusters of clients whose labels differ by a swap.

        num_clients: number of clients; swap: fraction of labels swapped in cluster 1.'''
"""

from __future__ import annotations

import inspect
import re

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_JOIN = r"\s*(?:,|/|\band\b)\s*"
_HEAD = re.compile(rf"(?:^|(?<=\n)|(?<=;\s)|(?<=\.\s)|(?<=\.\s\s))[ \t]*"
                   rf"({_NAME}(?:{_JOIN}{_NAME})*)(\s*\([^)\n]*\))?\s*:\s")
_FOREIGN_HEAD = re.compile(r";\s[^;:]{0,40}:\s")   # "; some other note: ..." ends an entry


def summary(doc: str | None) -> str:
    """The first sentence of ``doc`` on one line ("" when there is none); a period inside
    parentheses ("FedAvgM (Hsu et al. 2019): ...") does not end it."""
    text = " ".join((inspect.cleandoc(doc) if doc else "").split("\n\n")[0].split())
    if not text:
        return ""
    depth = _depths(text)
    m = next((m for m in re.finditer(r"\.(\s|$)", text) if depth[m.start()] == 0), None)
    return text[:m.start()] if m else text


def meanings(doc: str | None, names) -> dict[str, str]:
    """{parameter: meaning} for the ``names`` that ``doc`` describes (module docstring)."""
    names = set(names)
    text = inspect.cleandoc(doc) if doc else ""
    depth = _depths(text)
    known = lambda m: all(n.strip() in names for n in re.split(_JOIN, m.group(1)))
    # an entry ends at the next head outside parentheses: one of ``names``, or any ``word:``
    # that starts a line after a finished sentence or entry ("...;" / "..." + "." / a blank line)
    heads = [m for m in _HEAD.finditer(text) if depth[m.start(1)] == 0 and (
             known(m) or re.search(r"(^|[;.:]\s*\n|\n\s*\n)[ \t]*$", text[:m.start(1)]))]
    out: dict[str, str] = {}
    for i, m in enumerate(heads):
        if not known(m):
            continue
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        para = re.search(r"\n\s*\n", text[m.end():end])        # the paragraph ends it
        end = m.end() + para.start() if para else end
        cut = next((c.start() for c in _FOREIGN_HEAD.finditer(text, m.end(), end)
                    if depth[c.start()] == 0), end)
        body = " ".join(text[m.end():cut].split()).rstrip(";. ").strip()
        if m.group(2):
            body = f"{body} {m.group(2).strip()}"
        for n in re.split(_JOIN, m.group(1)):
            out.setdefault(n.strip(), body)
    return {k: v for k, v in out.items() if v}


def _depths(text: str) -> list[int]:
    """The bracket depth at each character of ``text`` (and one past its end): "(", "[" and
    "{" open, ")", "]" and "}" close, so intervals such as (0, 1] balance. A paragraph whose
    brackets do not balance (or close before they open) counts as depth 0 throughout."""
    out = [0] * (len(text) + 1)
    for para in re.finditer(r".+?(?:\n\s*\n|\Z)", text, re.S):
        d, ok = 0, True
        for j in range(para.start(), para.end()):
            out[j] = d
            c = text[j]
            d += (c in "([{") - (c in ")]}")
            ok = ok and d >= 0
        if not ok or d != 0:
            out[para.start():para.end()] = [0] * (para.end() - para.start())
    return out


NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


class Registry(dict):
    """name -> builder, filled by the ``register_*`` calls, with what each name declares
    about itself: ``help[name]`` (one line) and ``defaults[name]`` (a dataset's
    ``DatasetDefaults``, or None)."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind, self.help, self.defaults = kind, {}, {}

    def check_name(self, name, replace: bool) -> None:
        """ValueError unless ``name`` is a new (or, with ``replace``, any) valid name."""
        if not isinstance(name, str) or not NAME.match(name):
            raise ValueError(f"{self.kind} name must be lower-case letters, digits, '-' or '_' "
                             f"(starting with a letter), got {name!r}")
        if name in self and not replace:
            raise ValueError(f"{self.kind} {name!r} is already registered; choose another name "
                             "or pass replace=True")

    def help_for(self, name: str, given: str, owner) -> str:
        """The one-line help: ``given``, else the first sentence of ``owner``'s docstring;
        ValueError when there is neither."""
        text = " ".join(str(given).split()) if given else summary(getattr(owner, "__doc__", None))
        if not text:
            raise ValueError(f"{self.kind} {name!r}: give help=\"one line\" or a docstring "
                             "whose first sentence says what it is")
        return text

    def __delitem__(self, name):
        super().__delitem__(name)
        self.help.pop(name, None)
        self.defaults.pop(name, None)

    def pop(self, name, *default):
        self.help.pop(name, None)
        self.defaults.pop(name, None)
        return super().pop(name, *default)
