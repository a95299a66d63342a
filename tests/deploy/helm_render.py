"""Renders the Helm chart's templates without helm, for tests on machines that lack it.

Only the subset of Go templates and Sprig that deploy/helm/kiln uses is understood: actions
with whitespace trimming ({{- -}}), if/else/end, range $i := ..., the values .Values.*,
.Release.Name/.Namespace, $ and range variables, and the functions int, until, gt, and, or,
not, quote, toYaml and nindent, in pipelines. Anything else raises NotImplementedError, so a
template that outgrows the subset fails its test loudly rather than rendering wrong.
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

import yaml

ACTION = re.compile(r"{{(-?)\s*(.*?)\s*(-?)}}", re.S)


def _truthy(v: Any) -> bool:
    return bool(v) and v != "0" if isinstance(v, str) else bool(v)


def _split(text: str, sep: str) -> list[str]:
    """Splits on `sep` outside parentheses and quotes."""
    out, depth, quoted, cur = [], 0, False, ""
    for c in text:
        if c == '"':
            quoted = not quoted
        elif not quoted and c == "(":
            depth += 1
        elif not quoted and c == ")":
            depth -= 1
        if c == sep and depth == 0 and not quoted:
            out.append(cur)
            cur = ""
        else:
            cur += c
    out.append(cur)
    return [p.strip() for p in out if p.strip()]


def _tokens(text: str) -> list[str]:
    return re.findall(r'\((?:[^()]|\([^()]*\))*\)|"[^"]*"|[^\s()]+', text)


class _Renderer:
    def __init__(self, values: dict, release: dict) -> None:
        self.root = {"Values": values, "Release": release}

    def value(self, token: str, scope: dict) -> Any:
        if token.startswith("("):
            return self.pipeline(token[1:-1], scope)
        if token.startswith('"'):
            return token[1:-1]
        if re.fullmatch(r"-?\d+", token):
            return int(token)
        if token in ("true", "false"):
            return token == "true"
        if token.startswith("$"):
            name, _, path = token.partition(".")
            base = self.root if name == "$" else scope[name]
        elif token.startswith("."):
            base, path = self.root, token[1:]
        else:
            raise NotImplementedError(f"template token {token!r}")
        for part in filter(None, path.split(".")):
            base = base.get(part) if isinstance(base, dict) else None
        return base

    def command(self, text: str, scope: dict, piped: tuple = ()) -> Any:
        tokens = _tokens(text)
        head = tokens[0]
        if re.fullmatch(r"[A-Za-z]\w*", head) and head not in ("true", "false"):
            args = [self.value(t, scope) for t in tokens[1:]] + list(piped)
            return FUNCTIONS[head](*args) if head in FUNCTIONS else _unknown(head)
        if len(tokens) != 1 or piped:
            raise NotImplementedError(f"template command {text!r}")
        return self.value(head, scope)

    def pipeline(self, text: str, scope: dict) -> Any:
        parts = _split(text, "|")
        result = self.command(parts[0], scope)
        for part in parts[1:]:
            result = self.command(part, scope, (result,))
        return result

    def render(self, text: str) -> str:
        pieces: list = []  # text, or (action, ...)
        pos = 0
        for m in ACTION.finditer(text):
            before = text[pos:m.start()]
            if m.group(1):
                before = before.rstrip()
            pieces.append(before)
            pieces.append(("action", m.group(2), bool(m.group(3))))
            pos = m.end()
        pieces.append(text[pos:])
        # Right trims apply to the text after the action.
        for i, p in enumerate(pieces):
            if isinstance(p, tuple) and p[2] and i + 1 < len(pieces):
                pieces[i + 1] = pieces[i + 1].lstrip()
        tree, rest = self._parse(pieces, 0)
        if rest != len(pieces):
            raise NotImplementedError("unbalanced end")
        return self._run(tree, {})

    def _parse(self, pieces: list, i: int, stop=("end",)) -> tuple:
        nodes = []
        while i < len(pieces):
            p = pieces[i]
            if isinstance(p, str):
                nodes.append(p)
                i += 1
                continue
            action = p[1]
            word = action.split()[0] if action else ""
            if word in ("end", "else"):
                return nodes, i
            if word in ("if", "range"):
                body, i = self._parse(pieces, i + 1)
                other: list = []
                if pieces[i][1] == "else":
                    other, i = self._parse(pieces, i + 1)
                if pieces[i][1] != "end":
                    raise NotImplementedError(f"after {action!r}: {pieces[i][1]!r}")
                nodes.append((word, action[len(word):].strip(), body, other))
                i += 1
                continue
            if action.startswith("/*"):
                i += 1
                continue
            nodes.append(("expr", action))
            i += 1
        return nodes, i

    def _run(self, nodes: list, scope: dict) -> str:
        out = []
        for n in nodes:
            if isinstance(n, str):
                out.append(n)
            elif n[0] == "expr":
                v = self.pipeline(n[1], scope)
                out.append("" if v is None else str(v).lower() if isinstance(v, bool) else str(v))
            elif n[0] == "if":
                branch = n[2] if _truthy(self.pipeline(n[1], scope)) else n[3]
                out.append(self._run(branch, scope))
            elif n[0] == "range":
                m = re.fullmatch(r"(\$\w+)\s*:=\s*(.*)", n[1])
                if not m:
                    raise NotImplementedError(f"range {n[1]!r}")
                for item in self.pipeline(m.group(2), scope):
                    out.append(self._run(n[2], {**scope, m.group(1): item}))
        return "".join(out)


def _unknown(name: str) -> Any:
    raise NotImplementedError(f"template function {name!r}")


def _to_yaml(v: Any) -> str:
    return yaml.safe_dump(v, default_flow_style=False, sort_keys=True).rstrip("\n")


FUNCTIONS = {
    "int": lambda v: int(v or 0),
    "until": lambda n: list(range(n)),
    "gt": lambda a, b: a > b,
    "and": lambda *a: next((x for x in a if not _truthy(x)), a[-1]),
    "or": lambda *a: next((x for x in a if _truthy(x)), a[-1]),
    "not": lambda v: not _truthy(v),
    "quote": lambda v: '"' + str(v).replace('"', '\\"') + '"',
    "toYaml": _to_yaml,
    "nindent": lambda n, s: "\n" + "\n".join(" " * n + line for line in s.splitlines()),
}


def merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for k, v in override.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def render_chart(chart: pathlib.Path, overrides: dict | None = None, name: str = "kiln",
                 namespace: str = "ml") -> dict[str, str]:
    """Each template's rendered text, by file name, with values.yaml merged with
    `overrides`."""
    values = merge(yaml.safe_load((chart / "values.yaml").read_text()), overrides or {})
    renderer = _Renderer(values, {"Name": name, "Namespace": namespace})
    return {p.name: renderer.render(p.read_text())
            for p in sorted((chart / "templates").iterdir()) if p.is_file()}
