"""Captures the real-graph corpus on a GPU machine with PyTorch (tests/data/graphs).

Each case builds a model family in one configuration, compiles it with kiln.capture's
recording backend, runs one training step (forward, backward, and for optimizer cases the
step itself) or an inference call, and writes every graph AOTAutograd produced. Cases
marked `reference` also record their graphs' real inputs and eager outputs, the ground truth
the interpreter is checked against. Sizes are small on purpose: the graphs have the structure
of the real models, and the files stay small.

    PYTHONPATH=client/python python3 tests/gpu/capture_corpus.py --out $OUT/corpus [--only NAME]
        [--partitioner min_cut|default]

The joint graph is split as the backend splits it by default (min-cut); `--partitioner
default` captures the graphs of tests/data/graphs' top level.

Writes OUT/*.json, OUT/ref/*.ref.json, OUT/manifest.json (model, configuration, PyTorch
version per graph) and OUT/failures.json (cases that did not capture, and why).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from kiln import capture

DEVICE = "cuda"
REFERENCE_BYTES = 512 << 10


@dataclass
class Case:
    name: str
    family: str
    config: str
    build: Callable[[], tuple]  # () -> (model or step function, inputs)
    mode: str = "train"  # "train", "infer", "step" (a compiled optimizer step)
    dtype: str = "fp32"  # "fp32", "bf16" (autocast), "fp16" (autocast)
    dynamic: Any = None
    reference: bool = False
    # Extra calls with other inputs after the first (automatic-dynamic recompiles).
    more_inputs: Callable[[], list] | None = None


# --- model families --------------------------------------------------------------------------


class Mlp(nn.Module):
    def __init__(self, d: int = 64, h: int = 256, p: float = 0.0) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, d)
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln(x)))))


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int, p: float) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.p if self.training else 0.0)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class NanoGpt(nn.Module):
    def __init__(self, vocab: int = 256, d: int = 64, heads: int = 4, layers: int = 2,
                 block: int = 64, p: float = 0.0) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(nn.ModuleDict({
                "ln1": nn.LayerNorm(d), "attn": CausalSelfAttention(d, heads, p),
                "ln2": nn.LayerNorm(d), "mlp": Mlp(d, 4 * d, p)}))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight
        self.drop = nn.Dropout(p)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for blk in self.blocks:
            x = x + blk["attn"](blk["ln1"](x))
            mlp = blk["mlp"]
            x = x + mlp.fc2(F.gelu(mlp.fc1(blk["ln2"](x))))
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class HfLoss(nn.Module):
    """A Hugging Face model whose forward returns the loss."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        out = self.model(*args) if len(args) != 2 else self.model(input_ids=args[0], labels=args[1])
        return out.loss if hasattr(out, "loss") and out.loss is not None else out[0].float().mean()


def tokens(b: int, t: int, vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (b, t), device=DEVICE)


def build_mlp(p: float = 0.0, tiny: bool = False) -> tuple:
    d, h, b = (32, 64, 2) if tiny else (64, 256, 8)
    return Mlp(d, h, p), [torch.randn(b, 16, d, device=DEVICE, requires_grad=True)]


def build_nanogpt(p: float = 0.0, tiny: bool = False) -> tuple:
    if tiny:
        return NanoGpt(vocab=64, d=32, heads=2, layers=1, block=16), \
            [tokens(2, 16, 64), tokens(2, 16, 64)]
    return NanoGpt(p=p), [tokens(4, 64, 256), tokens(4, 64, 256)]


def build_gpt2(attn: str = "sdpa", p: float = 0.0, tiny: bool = False,
               vocab: int = 0) -> tuple:
    """HF GPT-2, small. `vocab` overrides the vocabulary size (GPT-2's own, 50,257, makes
    the logits' rows unaligned for 16-bit matmuls; 517 does the same at this size)."""
    from transformers import AutoModelForCausalLM, GPT2Config

    size, d, layers, t = (64, 32, 1, 16) if tiny else (512, 64, 2, 64)
    vocab = vocab or size
    cfg = GPT2Config(vocab_size=vocab, n_positions=128, n_embd=d, n_layer=layers, n_head=4,
                     resid_pdrop=p, embd_pdrop=p, attn_pdrop=p, bos_token_id=0, eos_token_id=0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    return HfLoss(model), [tokens(2, t, vocab), tokens(2, t, vocab)]


def build_gpt2_124m(batch: int = 2, seq: int = 128) -> tuple:
    """GPT-2 at its published size (124M parameters: 12 layers, 768 wide, 50,257 tokens),
    dropout off, on `batch` sequences of `seq` tokens."""
    from transformers import AutoModelForCausalLM, GPT2Config

    cfg = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    return HfLoss(model), [tokens(batch, seq, cfg.vocab_size), tokens(batch, seq, cfg.vocab_size)]


def build_llama(tiny: bool = False) -> tuple:
    from transformers import AutoModelForCausalLM, LlamaConfig

    vocab, d, ff, layers, t = (64, 32, 64, 1, 16) if tiny else (512, 64, 172, 2, 64)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=d, intermediate_size=ff,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=128, bos_token_id=0, eos_token_id=0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    return HfLoss(model), [tokens(2, t, vocab), tokens(2, t, vocab)]


class BertClassifier(nn.Module):
    def __init__(self, tiny: bool = False) -> None:
        super().__init__()
        from transformers import AutoModelForSequenceClassification, BertConfig

        vocab, d, layers = (64, 32, 1) if tiny else (512, 64, 2)
        cfg = BertConfig(vocab_size=vocab, hidden_size=d, num_hidden_layers=layers,
                         num_attention_heads=4, intermediate_size=2 * d,
                         max_position_embeddings=128, num_labels=3, hidden_dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0)
        self.model = AutoModelForSequenceClassification.from_config(
            cfg, attn_implementation="sdpa")

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, attention_mask=mask, labels=labels).loss


def build_bert(tiny: bool = False) -> tuple:
    t, vocab = (16, 64) if tiny else (32, 512)
    mask = torch.ones(2, t, dtype=torch.long, device=DEVICE)
    mask[1, t - 5:] = 0
    return BertClassifier(tiny), [tokens(2, t, vocab), mask, torch.tensor([0, 2], device=DEVICE)]


class T5Loss(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from transformers import AutoModelForSeq2SeqLM, T5Config

        cfg = T5Config(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                       num_decoder_layers=2, num_heads=4, dropout_rate=0.0,
                       decoder_start_token_id=0, pad_token_id=0)
        self.model = AutoModelForSeq2SeqLM.from_config(cfg)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, labels=labels).loss


def build_t5() -> tuple:
    return T5Loss(), [tokens(2, 32, 512), tokens(2, 16, 512)]


class Classify(nn.Module):
    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.net(x), y)


def images(b: int, c: int, hw: int, classes: int = 10) -> list:
    return [torch.randn(b, c, hw, hw, device=DEVICE),
            torch.randint(0, classes, (b,), device=DEVICE)]


def build_resnet18(batch: int = 4, hw: int = 64) -> tuple:
    import torchvision

    return Classify(torchvision.models.resnet18(num_classes=10)), images(batch, 3, hw)


def build_resnet18_infer() -> tuple:
    import torchvision

    return torchvision.models.resnet18(num_classes=10).eval(), images(2, 3, 64)[:1]


def build_mobilenet_v3() -> tuple:
    import torchvision

    return Classify(torchvision.models.mobilenet_v3_small(num_classes=10)), images(4, 3, 64)


def build_vit(tiny: bool = False) -> tuple:
    from torchvision.models.vision_transformer import VisionTransformer

    hw, d, layers, b = (16, 32, 1, 2) if tiny else (32, 64, 2, 4)
    vit = VisionTransformer(image_size=hw, patch_size=8, num_layers=layers, num_heads=4,
                            hidden_dim=d, mlp_dim=2 * d, num_classes=10)
    return Classify(vit), images(b, 3, hw)


def build_convnext() -> tuple:
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    cfg = [CNBlockConfig(32, 64, 1), CNBlockConfig(64, None, 1)]
    return Classify(ConvNeXt(cfg, num_classes=10)), images(4, 3, 32)


class TinyUnet(nn.Module):
    """Diffusion-style blocks: group norm, SiLU, strided and transposed convolutions,
    nearest upsampling, skip concatenation."""

    def __init__(self, c: int = 32) -> None:
        super().__init__()
        self.inp = nn.Conv2d(3, c, 3, padding=1)
        self.down = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        self.norm1 = nn.GroupNorm(8, 2 * c)
        self.mid = nn.Conv2d(2 * c, 2 * c, 3, padding=1)
        self.up = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.norm2 = nn.GroupNorm(8, 2 * c)
        self.out = nn.Conv2d(2 * c, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h0 = F.silu(self.inp(x))
        h = F.silu(self.norm1(self.down(h0)))
        h = self.mid(h) + F.interpolate(h, scale_factor=1.0, mode="nearest")
        h = torch.cat([self.up(h), h0], dim=1)
        return F.mse_loss(self.out(F.silu(self.norm2(h))), x)


def build_unet(tiny: bool = False) -> tuple:
    c, hw = (16, 8) if tiny else (32, 32)
    return TinyUnet(c), [torch.randn(2, 3, hw, hw, device=DEVICE)]


class TinyCnn(nn.Module):
    """Batch norm (statistics updated in training), max pooling, a depthwise convolution,
    hardswish, adaptive average pooling."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.pw = nn.Conv2d(16, 32, 1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        h = self.pw(F.hardswish(self.bn2(self.dw(h))))
        return F.cross_entropy(self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1)), y)


def build_cnn() -> tuple:
    return TinyCnn(), images(4, 3, 16)


def build_timm(name: str, hw: int, **kwargs: Any) -> tuple:
    import timm

    return Classify(timm.create_model(name, pretrained=False, num_classes=10, **kwargs)), \
        images(4, 3, hw)


def optimizer_step(kind: str) -> tuple:
    model = NanoGpt().to(DEVICE)
    loss = model(tokens(4, 64, 256), tokens(4, 64, 256))
    loss.backward()
    if kind == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, foreach=True)
    opt.step()  # the state exists before the compiled step, as after a first eager step

    def step() -> None:
        opt.step()

    return step, []


class FunctionalAllReduce(nn.Module):
    """A data-parallel step written with functional collectives (one rank)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist
        import torch.distributed._functional_collectives as fc

        h = fc.all_reduce(self.fc(x), "sum", dist.group.WORLD)
        g = fc.all_gather_tensor(h, 0, dist.group.WORLD)
        return F.gelu(g).sum()


def build_collectives() -> tuple:
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29512", rank=0,
                                world_size=1)
    return FunctionalAllReduce(), [torch.randn(8, 64, device=DEVICE, requires_grad=True)]


def tiny(build: Callable, *args: Any) -> Callable[[], tuple]:
    return lambda: build(*args, tiny=True)


CASES = [
    Case("mlp_fp32", "MLP", "fp32", build_mlp),
    Case("mlp_bf16", "MLP", "bf16 autocast", build_mlp, dtype="bf16"),
    Case("mlp_dropout", "MLP", "fp32, dropout 0.1", lambda: build_mlp(0.1)),
    Case("mlp_dynamic", "MLP", "fp32, dynamic=True", build_mlp, dynamic=True),
    Case("mlp_auto_dynamic", "MLP", "fp32, automatic-dynamic recompile (batch 8 then 12)",
         build_mlp, more_inputs=lambda: [torch.randn(12, 16, 64, device=DEVICE,
                                                     requires_grad=True)]),
    Case("nanogpt_fp32", "nanoGPT", "fp32", build_nanogpt),
    Case("nanogpt_bf16", "nanoGPT", "bf16 autocast", build_nanogpt, dtype="bf16"),
    Case("nanogpt_dropout", "nanoGPT", "fp32, dropout 0.1 (SDPA dropout)",
         lambda: build_nanogpt(0.1)),
    Case("nanogpt_dynamic", "nanoGPT", "fp32, dynamic=True", build_nanogpt, dynamic=True),
    Case("gpt2_fp32", "HF GPT-2", "fp32, SDPA attention", build_gpt2),
    Case("gpt2_eager_attn", "HF GPT-2", "fp32, eager attention (masked softmax)",
         lambda: build_gpt2("eager")),
    Case("gpt2_bf16", "HF GPT-2", "bf16 autocast", build_gpt2, dtype="bf16"),
    Case("gpt2_vocab_bf16", "HF GPT-2", "bf16 autocast, 517 tokens (unaligned logit rows)",
         lambda: build_gpt2(vocab=517), dtype="bf16"),
    Case("gpt2_fp16", "HF GPT-2", "fp16 autocast", build_gpt2, dtype="fp16"),
    Case("gpt2_infer", "HF GPT-2", "fp32, inference under no_grad", build_gpt2, mode="infer"),
    Case("llama_fp32", "HF Llama", "fp32 (RMSNorm, RoPE, GQA, SiLU-gated MLP)", build_llama),
    Case("llama_bf16", "HF Llama", "bf16 autocast", build_llama, dtype="bf16"),
    Case("llama_dynamic", "HF Llama", "fp32, dynamic=True", build_llama, dynamic=True),
    Case("bert_fp32", "HF BERT", "fp32, attention mask", build_bert),
    Case("bert_fp16", "HF BERT", "fp16 autocast, attention mask", build_bert, dtype="fp16"),
    Case("t5_fp32", "HF T5", "fp32 encoder-decoder", build_t5),
    Case("resnet18_fp32", "ResNet-18", "fp32, train (batch-norm statistics updated)",
         build_resnet18),
    Case("resnet18_bf16", "ResNet-18", "bf16 autocast", build_resnet18, dtype="bf16"),
    Case("resnet18_infer", "ResNet-18", "fp32, eval under no_grad", build_resnet18_infer,
         mode="infer"),
    Case("mobilenet_v3", "MobileNetV3-small", "fp32 (depthwise, hardswish, SE)",
         build_mobilenet_v3),
    Case("vit_fp32", "ViT", "fp32", build_vit),
    Case("vit_bf16", "ViT", "bf16 autocast", build_vit, dtype="bf16"),
    Case("convnext_fp32", "ConvNeXt", "fp32 (depthwise 7x7, LayerNorm2d, stochastic depth)",
         build_convnext),
    Case("unet_fp32", "UNet", "fp32 (group norm, transposed conv, upsample)", build_unet),
    Case("timm_efficientnet", "timm EfficientNet-B0", "fp32 (SiLU, SE, drop path)",
         lambda: build_timm("efficientnet_b0", 64)),
    Case("timm_deit_bf16", "timm DeiT-tiny", "bf16 autocast",
         lambda: build_timm("deit_tiny_patch16_224", 32, img_size=32, patch_size=8),
         dtype="bf16"),
    Case("adamw_step", "AdamW", "compiled optimizer step (foreach)",
         lambda: optimizer_step("adamw"), mode="step"),
    Case("sgd_step", "SGD", "compiled optimizer step (momentum, foreach)",
         lambda: optimizer_step("sgd"), mode="step"),
    Case("collectives", "functional collectives", "all_reduce + all_gather, 1 rank",
         build_collectives),
    # Tiny configurations whose graphs carry PyTorch's own outputs (ref/): dropout off.
    Case("ref_mlp", "MLP", "fp32, tiny, reference values", tiny(build_mlp), reference=True),
    Case("ref_mlp_bf16", "MLP", "bf16 autocast, tiny, reference values", tiny(build_mlp),
         dtype="bf16", reference=True),
    Case("ref_mlp_dynamic", "MLP", "fp32, dynamic=True, tiny, reference values", tiny(build_mlp),
         dynamic=True, reference=True),
    Case("ref_nanogpt", "nanoGPT", "fp32, tiny, reference values", tiny(build_nanogpt),
         reference=True),
    Case("ref_gpt2_eager_attn", "HF GPT-2", "fp32, eager attention, tiny, reference values",
         tiny(build_gpt2, "eager"), reference=True),
    Case("ref_llama", "HF Llama", "fp32, tiny, reference values", tiny(build_llama),
         reference=True),
    Case("ref_bert", "HF BERT", "fp32, attention mask, tiny, reference values",
         tiny(build_bert), reference=True),
    Case("ref_vit", "ViT", "fp32, tiny, reference values", tiny(build_vit), reference=True),
    Case("ref_unet", "UNet", "fp32, tiny, reference values", tiny(build_unet), reference=True),
    Case("ref_cnn", "CNN with batch norm", "fp32, train, reference values", build_cnn,
         reference=True),
    Case("ref_cnn_infer", "CNN with batch norm", "fp32, eval under no_grad, reference values",
         lambda: (TinyCnn().eval(), images(2, 3, 16)), mode="infer", reference=True),
]


def autocast(dtype: str) -> contextlib.AbstractContextManager:
    if dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=torch.bfloat16 if dtype == "bf16" else torch.float16)


def run_case(case: Case, out: pathlib.Path, partitioner: str = capture.DEFAULT_PARTITIONER) -> list:
    torch.manual_seed(0)
    torch._dynamo.reset()
    target, inputs = case.build()
    if isinstance(target, nn.Module):
        target = target.to(DEVICE)
    recorder = capture.Recorder(case.name,
                                reference_bytes=REFERENCE_BYTES if case.reference else 0,
                                partitioner=partitioner)
    compiled = torch.compile(target, backend=recorder.backend(), dynamic=case.dynamic)
    calls = [inputs] + ([case.more_inputs()] if case.more_inputs else [])
    for args in calls:
        if case.mode == "step":
            compiled()
        elif case.mode == "infer":
            with torch.no_grad(), autocast(case.dtype):
                compiled(*args)
        else:
            with autocast(case.dtype):
                loss = compiled(*args)
            # A non-scalar output gets a gradient that is not all ones.
            (loss if loss.dim() == 0 else loss.float().square().mean()).backward()
    torch.cuda.synchronize()
    return capture.write_graphs(recorder.graphs, out, case.name)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--partitioner", choices=capture.PARTITIONERS,
                        default=capture.DEFAULT_PARTITIONER)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    manifest, failures = [], []
    for case in CASES:
        if args.only and case.name not in args.only:
            continue
        start = time.time()
        try:
            paths = run_case(case, args.out, args.partitioner)
        except Exception as e:  # one family failing must not lose the others
            failures.append({"case": case.name, "error": f"{type(e).__name__}: {e}",
                             "trace": traceback.format_exc()[-3000:]})
            print(f"FAIL {case.name}: {type(e).__name__}: {e}", flush=True)
            continue
        for p in paths:
            manifest.append({"file": p.name, "model": case.family, "config": case.config,
                             "mode": case.mode, "torch": torch.__version__,
                             "partitioner": args.partitioner,
                             "reference": (args.out / "ref" / p.name.replace(
                                 ".json", ".ref.json")).exists()})
        print(f"ok {case.name}: {len(paths)} graphs in {time.time() - start:.1f}s", flush=True)
    (args.out / "manifest.json").write_text(json.dumps(
        {"format": capture.FORMAT, "device": torch.cuda.get_device_name(),
         "graphs": manifest}, indent=1))
    (args.out / "failures.json").write_text(json.dumps(failures, indent=1))
    print(f"{len(manifest)} graphs, {len(failures)} failed cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
