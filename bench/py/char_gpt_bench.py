"""PyTorch 2.x's side of examples/11_char_gpt: the same character-level GPT (2 pre-LayerNorm blocks,
4 heads, d_model 128, block 64, batch 32; nn.MultiheadAttention with need_weights=False, so
PyTorch's fused attention), AdamW + clip-by-norm, under torch.autocast("cpu", torch.bfloat16) or
in f32, on the same text; training tokens/s over `--steps` steps after 5 warm-up steps.

    pip install torch        # a PyTorch 2.x, for this script only (never a build or test dependency)
    python3 bench/py/char_gpt_bench.py [--threads 1] [--steps 100] [--precision bf16|f32]
    HG_NUM_THREADS=1 build/examples/11_char_gpt 100        # halfgrad's, printing tokens/s
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

BLOCK, MODEL, HEADS, LAYERS, BATCH = 64, 128, 4, 2, 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(MODEL), nn.LayerNorm(MODEL)
        self.attn = nn.MultiheadAttention(MODEL, HEADS, dropout=0.1, batch_first=True)
        self.fc, self.proj = nn.Linear(MODEL, 4 * MODEL), nn.Linear(4 * MODEL, MODEL)
        self.drop = nn.Dropout(0.1)
        self.register_buffer("mask", torch.ones(BLOCK, BLOCK, dtype=torch.bool).triu(1))

    def forward(self, x):
        h = self.ln1(x)
        t = x.shape[1]
        x = x + self.drop(self.attn(h, h, h, need_weights=False, attn_mask=self.mask[:t, :t], is_causal=True)[0])
        return x + self.drop(self.proj(F.gelu(self.fc(self.ln2(x)))))


class CharGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(256, MODEL), nn.Embedding(BLOCK, MODEL)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(MODEL)
        self.head = nn.Linear(MODEL, 256, bias=False)

    def forward(self, idx):
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--precision", default="bf16", choices=["bf16", "f32"])
    p.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    data = torch.tensor(list(open(a.text, "rb").read()), dtype=torch.long)
    blocks = (len(data) * 9 // 10 - 1) // BLOCK
    model = CharGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.1)

    def step():
        starts = torch.randint(0, blocks, (BATCH,)) * BLOCK
        x = torch.stack([data[s:s + BLOCK] for s in starts])
        y = torch.stack([data[s + 1:s + BLOCK + 1] for s in starts])
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", torch.bfloat16, enabled=a.precision == "bf16"):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, 256), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    for _ in range(5):
        step()
    start = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    seconds = time.perf_counter() - start
    print(f"PyTorch {torch.__version__}, {a.threads} thread(s), {a.precision}: {a.steps * BATCH * BLOCK / seconds:.0f} "
          f"tokens/s (loss {loss:.3f})")


if __name__ == "__main__":
    main()
