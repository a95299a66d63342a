"""Captures one step_time configuration's AOTAutograd graphs with the min-cut partitioner's
debug log: which values the forward saves for the backward, and why the partitioner would
not recompute them. Run on the GPU machine from the repository root, after
`deploy/gpu-bundle.sh .bundle`:

    source .bundle/env.sh
    python3 tests/gpu/partition_debug.py --config gpt2_124m_bf16 --out $OUT/pd

Writes OUT/CONFIG.{fw,bw}.json (kiln.capture's format, for kilnc; the forward's outputs
after the user's are the saved values) and OUT/partitioner.log: PyTorch's partitioner log at
DEBUG level ("materialized backwards: ..." names a value that a non-fusible op of the
backward reads, which min-cut then never recomputes) and its debug summary.

The graphs are traced as the kiln backend traces them, with kiln.partitioning's
decompositions; --decompose adds more. With --loss it partitions GPT-2's loss alone instead,
once per set of decompositions (none, --decompose's, Kiln's, and Kiln's but detach's) and per
min-cut switch turned off (BANS), and writes what each forward saves to
OUT/loss_variants.txt.
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import sys
from typing import Optional, Sequence

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))


# Min-cut's switches (torch._functorch.config), each turned off alone in --loss's variants.
BANS = ("ban_recompute_reductions", "ban_recompute_materialized_backward",
        "ban_recompute_not_in_allowlist", "ban_recompute_long_fusible_chains",
        "ban_recompute_used_far_apart")


def saved(graph: dict) -> list[str]:
    """A forward capture's outputs: name, op, dtype and shape each."""
    nodes = {n["name"]: n for n in graph["nodes"]}
    output = next(n for n in graph["nodes"] if n["op"] == "output")
    lines = []
    for ref in output["args"][0]:
        node = nodes.get(ref.get("node", "")) if isinstance(ref, dict) else None
        if node is None:
            lines.append(repr(ref))  # a constant or None among the outputs
            continue
        meta = node["meta"] if isinstance(node["meta"], dict) else {}
        lines.append(f"{node['name']} {node['target']} {meta.get('dtype', '')} "
                     f"{meta.get('shape', '')}")
    return lines


def loss_variants(out: pathlib.Path, table: dict) -> None:
    """HF GPT-2's loss alone, on [4, 512, 50257] bf16 logits, partitioned by min-cut with
    each of BANS off in turn, under several sets of decompositions (none, `table`'s, Kiln's
    and Kiln's but `detach`): what the forward saves."""
    import torch
    import torch._functorch.config as functorch_config
    from torch._dynamo.backends.common import aot_autograd
    from transformers.loss.loss_utils import ForCausalLMLoss

    from kiln import capture, partitioning

    vocab = 50257
    logits = torch.randn(4, 512, vocab, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (4, 512), device="cuda")
    lines = []
    kilns = partitioning.decompositions(capture.DEFAULT_PARTITIONER)
    tables = {"none": {}, "asked": table, "kiln's": kilns,
              "kiln's but detach": {op: fn for op, fn in kilns.items()
                                    if str(op) != "aten.detach.default"}}
    for name, chosen in tables.items():
        for ban in ("",) + BANS:
            if ban and not hasattr(functorch_config, ban):
                lines.append(f"decompositions {name}, {ban}: not a switch of this PyTorch")
                continue
            torch._dynamo.reset()
            recorder = capture.Recorder("loss", partitioner=capture.DEFAULT_PARTITIONER)
            backend = aot_autograd(fw_compiler=recorder._compiler("fw"),
                                   bw_compiler=recorder._compiler("bw"),
                                   partition_fn=partitioning.partition_fn(
                                       capture.DEFAULT_PARTITIONER),
                                   decompositions=chosen)
            patch = {ban: False} if ban else {}
            with functorch_config.patch(patch):
                loss = torch.compile(lambda x, y: ForCausalLMLoss(x, y, vocab),
                                     backend=backend)(logits, labels)
                loss.backward()
            fw = next(g for g in recorder.graphs if g.kind == "fw")
            lines.append(f"decompositions {name}, {ban or 'defaults'}:")
            lines += [f"  {line}" for line in saved(fw.capture)]
    (out / "loss_variants.txt").write_text("\n".join(lines) + "\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="gpt2_124m_bf16")
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--decompose", default="",
                        help="aten ops (comma-separated, as _log_softmax.default) that "
                             "AOTAutograd decomposes before partitioning, as an experiment")
    parser.add_argument("--loss", action="store_true",
                        help="partition GPT-2's loss alone under min-cut's variants instead "
                             "(OUT/loss_variants.txt)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    import torch
    import torch._functorch.config as functorch_config

    import capture_corpus as corpus
    from kiln import capture
    from step_time import CONFIGS

    log_path = args.out / "partitioner.log"
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    partitioner_log = logging.getLogger("torch._functorch.partitioners")
    partitioner_log.addHandler(handler)
    partitioner_log.setLevel(logging.DEBUG)
    functorch_config.debug_partitioner = True

    from torch._decomp import get_decompositions

    table = get_decompositions([
        getattr(getattr(torch.ops.aten, name.split(".")[0]), name.split(".")[1])
        for name in args.decompose.split(",") if name])
    if args.loss:
        loss_variants(args.out, table)
        return 0
    if table:
        import torch._dynamo.backends.common as common

        aot_autograd = common.aot_autograd

        def with_table(**kwargs: object) -> object:
            kwargs["decompositions"] = {**kwargs.get("decompositions", {}), **table}
            return aot_autograd(**kwargs)

        common.aot_autograd = with_table
    bench, dtype = CONFIGS[args.config]
    case = corpus.Case(args.config, bench.name, dtype,
                       lambda: getattr(corpus, bench.builder)(**bench.kwargs), dtype=dtype)
    paths = corpus.run_case(case, args.out, capture.DEFAULT_PARTITIONER)
    handler.close()
    print(f"{args.config}: {', '.join(p.name for p in paths)}; log {log_path}")
    print(f"torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
