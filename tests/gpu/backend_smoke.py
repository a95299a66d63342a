"""torch.compile(backend="kiln") against a kilnd started from the GPU bundle, on a GPU machine.

Run from the repository root after `deploy/gpu-bundle.sh .bundle` (carried with the tree):

    python3 tests/gpu/backend_smoke.py --bundle .bundle --out $OUT [--only mlp,nanogpt,convnet]

Starts kilnd from the bundle, then trains an MLP, a small nanoGPT and a small convolutional
net with batch norm for a few AdamW steps, each in a fresh process, eagerly and with
backend="kiln", and writes OUT/backend_smoke.json: per model and run the losses, the largest
loss difference against eager, the largest difference of a buffer's sum against eager's (batch
norm's running statistics, which the compiled forward writes back into the module), the
warnings the backend gave, and kilnd's compile counters (requests by outcome, compiles by
result) before and after. The second "kiln" process must find every graph in kilnd's cache
(hits only). Compiled graphs run on Kiln's GPU runtime (kiln.gpu_runtime), so losses and
buffers follow eager's within float32 rounding; the warnings say which graphs, if any, fell
back and why.

Kiln runs the convolutional net channels last (kiln.layouts), and cuDNN's channels-last
algorithms round otherwise than its NCHW ones, which AdamW's steps then amplify. So the
convnet also trains eagerly in channels last (`eager_channels_last`, the model and its inputs
converted): its difference from eager is what the layout alone accounts for, and each kiln
run is compared with it too (`max_loss_diff_channels_last`, `max_buffer_diff_channels_last`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from kilnd_process import KilnServer, script_parser

STEPS = 20
MODELS = ("mlp", "nanogpt", "convnet")

TRAIN = r'''
import json, logging, sys, warnings
import torch, torch.nn as nn, torch.nn.functional as F

class Count(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.kiln = 0
    def emit(self, record):
        self.kiln += "runs on Kiln's runtime" in record.getMessage()

count = Count()
logging.getLogger("kiln").addHandler(count)
logging.getLogger("kiln").setLevel(logging.INFO)
sys.path.insert(0, "tests/gpu")
from capture_corpus import NanoGpt, Mlp, tokens

# Convolutions without a bias, as ResNet's: a bias before batch norm gets a gradient of
# rounding noise alone, which AdamW turns into steps of the learning rate, so the running
# means would follow each run's noise.
class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 10)
    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.head(x.mean((2, 3)))

model_name, mode, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
if model_name == "convnet":
    model = ConvNet().cuda()
    data = [torch.randn(8, 3, 16, 16, device="cuda") for _ in range(steps)]
    loss_of = lambda m, x: m(x).square().mean()
elif model_name == "mlp":
    model = Mlp(64, 256).cuda()
    data = [torch.randn(8, 16, 64, device="cuda") for _ in range(steps)]
    loss_of = lambda m, x: m(x).square().mean()
else:
    model = NanoGpt().cuda()
    data = [(tokens(4, 64, 256), tokens(4, 64, 256)) for _ in range(steps)]
    loss_of = lambda m, xy: m(*xy)
if mode == "eager_channels_last":
    model = model.to(memory_format=torch.channels_last)
    data = [x.contiguous(memory_format=torch.channels_last) for x in data]
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
run = model if mode.startswith("eager") else torch.compile(model, backend="kiln")
losses, caught = [], []
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    for batch in data:
        opt.zero_grad()
        loss = loss_of(run, batch)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    caught = [f"{x.category.__name__}: {x.message}" for x in w if "kiln" in str(x.message).lower()
              or x.category.__name__.startswith("Kiln")]
buffers = [float(b.double().sum()) for b in model.buffers()]
print(json.dumps({"losses": losses, "buffers": buffers, "warnings": caught,
                  "graphs_on_kiln_runtime": count.kiln}))
'''


def largest_difference(reference: list[float], values: list[float]) -> float:
    return max((abs(a - b) for a, b in zip(reference, values)), default=0.0)


def main() -> int:
    parser = script_parser()
    parser.add_argument("--only", default=",".join(MODELS), help="models, comma-separated")
    args = parser.parse_args()
    models = [m for m in args.only.split(",") if m]
    if unknown := set(models) - set(MODELS):
        parser.error(f"unknown model(s) {', '.join(sorted(unknown))}; known: {', '.join(MODELS)}")
    with KilnServer(args.bundle, args.out) as server:
        report: dict = {"nvjitlink": server.nvjitlink, "runs": []}
        run_env = dict(server.env, PYTHONUNBUFFERED="1")
        for model in models:
            references: dict[str, dict] = {}  # eager mode -> its losses and buffers
            modes = ("eager", "eager_channels_last") if model == "convnet" else ("eager",)
            for mode in modes + ("kiln", "kiln"):
                before = server.metrics()
                start = time.time()
                p = subprocess.run([sys.executable, "-c", TRAIN, model, mode, str(STEPS)],
                                   env=run_env, capture_output=True, text=True, timeout=500)
                entry = {"model": model, "mode": mode, "rc": p.returncode,
                         "seconds": round(time.time() - start, 2)}
                if p.returncode == 0:
                    result = json.loads(p.stdout.strip().splitlines()[-1])
                    entry.update(result)
                    for name, reference in references.items():
                        suffix = name.removeprefix("eager")
                        entry["max_loss_diff" + suffix] = largest_difference(
                            reference["losses"], result["losses"])
                        entry["max_buffer_diff" + suffix] = largest_difference(
                            reference["buffers"], result["buffers"])
                    if mode.startswith("eager"):
                        references[mode] = result
                else:
                    entry["stderr"] = p.stderr[-3000:]
                after = server.metrics()
                entry["server"] = {k: after.get(k, 0) - before.get(k, 0) for k in after
                                   if after.get(k, 0) != before.get(k, 0)}
                report["runs"].append(entry)
                print(json.dumps(entry)[:1500], flush=True)
    (args.out / "backend_smoke.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
