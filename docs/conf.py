"""Sphinx configuration of the API reference: ``python -m sphinx -W -b html docs docs/_build``
(``pip install -e ".[docs]"``); the pages are README.md, docs/extending.md and the reference
built from the docstrings (docs/api.rst)."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))
os.environ.setdefault("JAX_PLATFORMS", "cpu")       # importing the package starts no device

project = "fedclust_jax"
author = "fedclust_jax authors"
from fedclust_jax import __version__ as release  # noqa: E402

extensions = ["sphinx.ext.autodoc", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"show-inheritance": True}
html_theme = "alabaster"
html_theme_options = {"description": "clustered and Byzantine-robust federated learning in JAX",
                      "fixed_sidebar": True}
html_static_path = []
html_show_copyright = False


# The docstrings are plain text, written for ``help()`` and a terminal: indented lines are
# layouts, signatures and tables, and ``*``, ``|`` and a trailing ``_`` are meant as
# characters. They are rendered as such: each indented block as a literal block, those
# characters escaped outside ``literals``. Everything else (``literals``, paragraphs, lists
# that start with "- ") is reStructuredText as written.
import re  # noqa: E402

_LITERAL = re.compile(r"(``.+?``)")


def _escape(text: str) -> str:
    parts = _LITERAL.split(text)
    for i in range(0, len(parts), 2):           # the text between ``literals``
        p = parts[i].replace("\\", "\\\\").replace("*", r"\*").replace("|", r"\|")
        parts[i] = re.sub(r"(?<=\w)_(?=\W|$)", r"\_", p)
    return "".join(parts)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def plain_text(app, what, name, obj, options, lines):
    out, i, n = [], 0, len(lines)
    while i < n:
        line = lines[i]
        if line.strip() and _indent(line) > 0 and not line.lstrip().startswith("- "):
            previous = next((x for x in reversed(out) if x.strip()), "")
            marked = previous.rstrip().endswith("::") and out and not out[-1].strip()
            if not marked:
                if previous.rstrip().endswith("::"):
                    out.append("")
                else:
                    out += ["", "::", ""]
            while i < n and (not lines[i].strip() or _indent(lines[i]) > 0):
                out.append(lines[i])
                i += 1
            out.append("")
            continue
        if line.lstrip().startswith("- ") and _indent(line) > 0:
            out.append(_escape(line.strip()))    # a list item indented under a paragraph
        else:
            out.append(_escape(line))
        i += 1
    lines[:] = out


def setup(app):
    app.connect("autodoc-process-docstring", plain_text)
