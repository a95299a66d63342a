"""A train_models configuration's graphs checked on the inputs training gives them: each graph
Kiln's runtime runs is, at its first call, also run eagerly (its FX graph module) on a copy of
the same inputs, and every output is compared. Random inputs (run_corpus.py) miss what only
real values bring out: exact zeros after a ReLU, ties, statistics consistent with their data.

    python3 tests/gpu/real_inputs.py --bundle .bundle --out $OUT --config resnet18_fp32

Writes OUT/real_inputs.json: per graph, each output's |kiln - eager| / |eager| (2-norms) and
the worst, largest first.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any, Optional

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from kilnd_process import KilnServer, script_parser  # noqa: E402
from worker_process import run_worker  # noqa: E402


def relative_errors(eager: list, kiln: list) -> list[Optional[float]]:
    """Each output's |kiln - eager| / |eager| in 2-norms (None for what is not a float
    tensor; inf for a shape that differs)."""
    import torch

    out: list[Optional[float]] = []
    for e, k in zip(eager, kiln):
        if not isinstance(e, torch.Tensor) or not e.is_floating_point():
            out.append(None)
        elif not isinstance(k, torch.Tensor) or k.shape != e.shape:
            out.append(float("inf"))
        else:
            norm = float(e.double().norm())
            diff = float((k.double() - e.double()).norm())
            out.append(diff / norm if norm else (0.0 if diff == 0 else float("inf")))
    return out


def worker(config_name: str, out: pathlib.Path) -> int:
    import torch

    import kiln.backend as backend
    import train_models as tm

    checked: list[dict] = []
    original = backend._runner

    def runner(decision: Any, gm: Any, inputs: Any, kind: str, policy: Any, name: str,
               cudagraphs: bool = False) -> Any:
        fn = original(decision, gm, inputs, kind, policy, name, cudagraphs)
        first = [True]

        def checked_run(args: list) -> Any:
            if first[0]:
                first[0] = False
                copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
                result = fn(list(args))
                eager = gm(*copies)
                eager = list(eager) if isinstance(eager, (list, tuple)) else [eager]
                errors = relative_errors(eager, list(result))
                names = [str(n) for n in gm.graph.find_nodes(op="output")[0].args[0]]
                ranked = sorted(((e, i, names[i] if i < len(names) else "?")
                                 for i, e in enumerate(errors) if e is not None), reverse=True)
                checked.append({"graph": name, "kind": kind, "outputs": len(errors),
                                "worst": [{"output": i, "node": n, "rel": e}
                                          for e, i, n in ranked[:12]]})
                (out / "real_inputs.json").write_text(json.dumps(checked, indent=1))
                return result
            return fn(args)

        checked_run._boxed_call = True
        return checked_run

    backend._runner = runner
    config = next(c for c in tm.CONFIGS if c.name == config_name)
    tm.train(config, "kiln", 1, lambda **event: None)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(argv[1], pathlib.Path(argv[2]))
    parser = script_parser()
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    with KilnServer(args.bundle, args.out) as server:
        result = run_worker([str(pathlib.Path(__file__).resolve()), "--worker", args.config,
                             str(args.out)], server.env, 300)
    print(result.output[-3000:])
    path = args.out / "real_inputs.json"
    print(path.read_text() if path.exists() else "no graph was checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
