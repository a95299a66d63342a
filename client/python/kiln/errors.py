"""The errors Kiln's trainer side raises.

Two families, because training treats them differently:
- CompileFailed and its subclasses: kilnd could not give this graph a usable artifact
  (unreachable, too slow, rejected the request, sent damaged bytes). The backend warns once
  and runs the graph per the `fallback` setting; training goes on.
- RankDivergence: the ranks of one job traced different graphs. Falling back would leave
  the ranks running different programs until a collective hangs, so it is always raised,
  before the graph runs.
SettingsError names an option that is wrong; it is raised when the backend is set up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:  # the generated modules are needed only where details are parsed
    from kiln.v1 import errors_pb2


class KilnError(Exception):
    """Base of every error Kiln's trainer side raises."""


class SettingsError(KilnError, ValueError):
    """A setting with a bad value. `option` is its name in torch.compile's options, `source`
    where the value came from ("options", or the environment variable's name)."""

    def __init__(self, option: str, source: str, what: str) -> None:
        origin = "" if source == "options" else f" (from {source})"
        super().__init__(f"kiln option '{option}'{origin}: {what}")
        self.option = option
        self.source = source


class CompileFailed(KilnError):
    """kilnd did not give a usable artifact. `code` is the gRPC status name ("UNAVAILABLE",
    ...), `detail` the server's kiln.v1.ErrorDetail when it sent one."""

    def __init__(self, code: str, message: str,
                 detail: Optional[errors_pb2.ErrorDetail] = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.detail = detail


class ServerUnreachable(CompileFailed):
    """No answer from kilnd: nothing listens at the address, the connection broke, TLS or
    the name did not resolve, or the server is draining (UNAVAILABLE)."""


class CompileTimeout(CompileFailed):
    """The deadline passed while the request travelled, queued, compiled, or waited at a
    rendezvous for ranks that never came (`missing_ranks`)."""

    @property
    def missing_ranks(self) -> list[int]:
        return list(self.detail.missing_ranks) if self.detail is not None else []


class CompileRejected(CompileFailed):
    """kilnd answered with an error: a malformed request (the violations name node and
    field), a compile failure, a full queue, a missing or weak token."""


class CaptureFailed(CompileFailed):
    """The graph could not be put into a compile request (an argument or value that
    kiln.v1.Graph cannot express); kilnd never saw it."""


class ArtifactMismatch(CompileFailed):
    """The compiled graph's bytes do not hash to the digest kilnd sent with them; the bytes
    are never used."""


class RankDivergence(KilnError, RuntimeError):
    """Ranks of job `job_id` sent different graphs for compile sequence `sequence`.
    `groups` maps each compile key to the ranks that sent it (largest group first);
    `differences` says where each smaller group first differs from the largest, naming the
    node."""

    def __init__(self, message: str, report: errors_pb2.DivergenceReport) -> None:
        self.job_id = report.job_id
        self.sequence = report.sequence
        self.groups: list[tuple[str, list[int]]] = [
            (g.compile_key, list(g.ranks)) for g in report.groups]
        self.differences: list[str] = list(report.differences)
        super().__init__(self._describe(message))

    @property
    def ranks(self) -> list[list[int]]:
        return [ranks for _, ranks in self.groups]

    def _describe(self, server_message: str) -> str:
        groups = "; ".join(f"ranks {_ranks(r)} sent key {k[:12]}" for k, r in self.groups)
        lines = [f"ranks of job '{self.job_id}' traced different graphs for compile sequence "
                 f"{self.sequence}: {groups}"]
        lines += [f"  {d}" for d in self.differences]
        if not self.differences and server_message:
            lines.append(f"  {server_message}")
        lines.append("Every rank must compile the same graphs in the same order; this is "
                     "raised before any collective of the graph can hang.")
        return "\n".join(lines)


def _ranks(ranks: Sequence[int]) -> str:
    return "[" + ",".join(str(r) for r in ranks) + "]"
