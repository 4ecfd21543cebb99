"""A GPT decoder and its training loop as nanoGPT writes them (model.py, train.py),
written once against `fw` (torch, or kiln used as torch).

Token and position embeddings, pre-LayerNorm blocks with causal self-attention through
F.scaled_dot_product_attention(is_causal=True) (nanoGPT's masked-softmax fallback where
the framework has none, as in PyTorch 1.13), a GELU MLP, no biases, weight tying, dropout;
AdamW with decay groups (2-D parameters decayed, the rest not), gradient accumulation over
2 micro-steps, clip_grad_norm_(1.0), and batches drawn every micro-step from a large
token array (randint + stack + from_numpy, pinned and copied non_blocking on CUDA).
The loss is read (item()) every step.
"""

import math

import numpy as np

from common import weights_like

SIZES = {  # the baby GPT of shared/BENCHMARKS.md, and its CPU size
    "gpu": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch_size=16, vocab_size=65),
    "cpu": dict(n_layer=2, n_head=4, n_embd=128, block_size=64, batch_size=8, vocab_size=65),
}
TOKENS = 1_000_000  # the "large token array" batches are drawn from


def define(fw):
    """The model classes over framework fw."""
    nn, F = fw.nn, fw.nn.functional

    class LayerNorm(nn.Module):
        """LayerNorm with an optional bias (PyTorch 1.13's nn.LayerNorm has no bias=False)."""

        def __init__(self, ndim, bias):
            super().__init__()
            self.weight = nn.Parameter(fw.ones(ndim))
            self.bias = nn.Parameter(fw.zeros(ndim)) if bias else None

        def forward(self, input):
            return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=c["bias"])
            self.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=c["bias"])
            self.attn_dropout = nn.Dropout(c["dropout"])
            self.resid_dropout = nn.Dropout(c["dropout"])
            self.n_head, self.n_embd, self.dropout = c["n_head"], c["n_embd"], c["dropout"]
            self.flash = hasattr(F, "scaled_dot_product_attention")
            if not self.flash:
                t = c["block_size"]
                self.register_buffer("bias", fw.tril(fw.ones(t, t)).view(1, 1, t, t))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            if self.flash:
                y = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0,
                    is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
                att = F.softmax(att, dim=-1)
                att = self.attn_dropout(att)
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_dropout(self.c_proj(y))

    class MLP(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=c["bias"])
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=c["bias"])
            self.dropout = nn.Dropout(c["dropout"])

        def forward(self, x):
            return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.ln_1 = LayerNorm(c["n_embd"], bias=c["bias"])
            self.attn = CausalSelfAttention(c)
            self.ln_2 = LayerNorm(c["n_embd"], bias=c["bias"])
            self.mlp = MLP(c)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlp(self.ln_2(x))
            return x

    class GPT(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.config = c
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
                wpe=nn.Embedding(c["block_size"], c["n_embd"]),
                drop=nn.Dropout(c["dropout"]),
                h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
                ln_f=LayerNorm(c["n_embd"], bias=c["bias"]),
            ))
            self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # weight tying

        def forward(self, idx, targets=None):
            device = idx.device
            b, t = idx.size()
            pos = fw.arange(0, t, dtype=fw.long, device=device)
            tok_emb = self.transformer.wte(idx)
            pos_emb = self.transformer.wpe(pos)
            x = self.transformer.drop(tok_emb + pos_emb)
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            logits = self.lm_head(x)
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                       ignore_index=-1)
            return logits, loss

        def configure_optimizers(self, weight_decay, learning_rate, betas):
            param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
            decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
            nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
            optim_groups = [
                {"params": decay_params, "weight_decay": weight_decay},
                {"params": nodecay_params, "weight_decay": 0.0},
            ]
            return fw.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)

    return dict(LayerNorm=LayerNorm, Block=Block, GPT=GPT)


def gpt_init(n_layer):
    """nanoGPT's _init_weights: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
    biases 0, LayerNorm weight 1."""
    def rule(name, shape, rng):
        if name.endswith("bias"):
            return np.zeros(shape)
        if len(shape) == 1:
            return np.ones(shape)
        std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
        return rng.normal(0.0, std, shape)

    return rule


class Train:
    """nanoGPT's train.py loop body: one optimizer step over gradient_accumulation_steps
    micro-batches; batch_index (tests) replaces randint with a fixed source of offsets."""

    def __init__(self, fw, device, size="cpu", dropout=0.2, batch_index=None, seed=1337,
                 grad_accum=2, lr=1e-3, amp=""):
        fw.manual_seed(seed)
        # amp "bf16" / "fp16": the forward and the loss under autocast, fp32 weights (the
        # usual mixed-precision training; fp16 would also want a GradScaler, not used here)
        self.amp = {"": None, "bf16": fw.bfloat16, "fp16": fw.float16}[amp]
        self.fw, self.device = fw, device
        self.cfg = dict(SIZES[size], dropout=dropout, bias=False)
        self.model = define(fw)["GPT"](self.cfg)
        weights_like(fw, self.model, gpt_init(self.cfg["n_layer"]), seed)
        self.model.to(device)
        self.forward = self.model
        self.optimizer = self.model.configure_optimizers(0.1, lr, (0.9, 0.99))
        self.data = np.random.default_rng(seed + 1).integers(
            0, self.cfg["vocab_size"], TOKENS, dtype=np.uint16)
        self.batch_index = batch_index
        self.grad_accum = grad_accum
        self.X, self.Y = self.get_batch()

    def compile(self, fn):
        self.forward = fn(self.model)

    def get_batch(self):
        torch, data = self.fw, self.data
        block_size, batch_size = self.cfg["block_size"], self.cfg["batch_size"]
        if self.batch_index is None:
            ix = torch.randint(len(data) - block_size, (batch_size,))
        else:
            ix = self.batch_index(len(data) - block_size, batch_size)
        x = torch.stack([torch.from_numpy((data[i:i + block_size]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + block_size]).astype(np.int64))
                         for i in ix])
        if str(self.device).startswith("cuda"):
            x = x.pin_memory().to(self.device, non_blocking=True)
            y = y.pin_memory().to(self.device, non_blocking=True)
        else:
            x, y = x.to(self.device), y.to(self.device)
        return x, y

    def step(self):
        for micro_step in range(self.grad_accum):
            if self.amp is None:
                logits, loss = self.forward(self.X, self.Y)
            else:
                with self.fw.autocast(device_type=str(self.device).split(":")[0],
                                      dtype=self.amp):
                    logits, loss = self.forward(self.X, self.Y)
            loss = loss / self.grad_accum
            self.X, self.Y = self.get_batch()  # prefetch while the device works
            loss.backward()
        self.fw.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.last = loss.item() * self.grad_accum
        return self.last

    def check_value(self):
        return self.last


def make(fw, device, size="cpu", **options):
    return Train(fw, device, size, **options)
