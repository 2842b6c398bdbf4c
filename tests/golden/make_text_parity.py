"""Fixtures of tests/test_model_parity.cpp's text cases: hg-train's character-level GPT and LSTM
(examples/train/text_models.h) trained by PyTorch for 200 steps from weights PyTorch drew, on byte
batches of the GPL-3 text both sides read from the fixture.

Writes into tests/golden/models/:
  text.safetensors      "batches": U8 [200, 8, 65], step t's 8 blocks of 65 bytes (64 inputs and
                        the 64 next bytes), cut at random offsets of /usr/share/common-licenses/GPL-3
  gpt.safetensors       the GPT's initial state dict (PyTorch's init, seed 0; the names of
  lstm.safetensors      halfgrad's modules) and "losses", PyTorch's f32 loss at each step (F64)

The recipe (the test repeats it): dropout off (its masks cannot be reproduced), train mode,
next-byte cross-entropy of the [8 * 64, 256] logits, gradients clipped to norm 1, AdamW (lr 1e-3,
betas (0.9, 0.999), eps 1e-8, weight decay 0.01) without a schedule. Run with Debian's
python3-torch:

    /usr/bin/python3 tests/golden/make_text_parity.py
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from make_model_parity import write_safetensors  # tests/golden/make_model_parity.py

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = "/usr/share/common-licenses/GPL-3"
STEPS, BATCH, BLOCK = 200, 8, 64
LR, WEIGHT_DECAY = 1e-3, 0.01


class Block(nn.Module):
    """hg_train::GptBlock: x + attn(ln1(x)), then x + proj(gelu(fc(ln2(x)))) (dropout off)."""

    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.ln1(x)
        t = x.shape[1]
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)  # True: may not attend
        x = x + self.attn(h, h, h, attn_mask=causal, need_weights=False)[0]
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class CharGPT(nn.Module):
    def __init__(self, block=64, d=128, heads=4, layers=2):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(256, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, 256, bias=False)

    def forward(self, idx):
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class CharLSTM(nn.Module):
    def __init__(self, embedding=64, hidden=256, layers=2):
        super().__init__()
        self.tokens = nn.Embedding(256, embedding)
        self.lstm = nn.LSTM(embedding, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, 256)

    def forward(self, idx):
        return self.head(self.lstm(self.tokens(idx))[0])


def train(model, batches, dtype=torch.float32):
    model = model.to(dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    losses = []
    for step in range(STEPS):
        b = batches[step].long()
        x, y = b[:, :BLOCK], b[:, 1:]
        loss = F.cross_entropy(model(x).reshape(-1, 256).float(), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    torch.set_num_threads(1)
    out_dir = os.path.join(HERE, "models")
    os.makedirs(out_dir, exist_ok=True)
    data = torch.tensor(list(open(TEXT, "rb").read()), dtype=torch.uint8)
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, data.numel() - BLOCK - 1, (STEPS, BATCH), generator=g)
    batches = torch.stack([torch.stack([data[s:s + BLOCK + 1] for s in row]) for row in starts.tolist()])
    meta = {"generator": "tests/golden/make_text_parity.py", "torch": torch.__version__}
    write_safetensors(os.path.join(out_dir, "text.safetensors"), {"batches": batches}, meta)
    for name, make in [("gpt", CharGPT), ("lstm", CharLSTM)]:
        torch.manual_seed(0)
        model = make()
        initial = {k: v.clone() for k, v in model.state_dict().items()}
        losses = train(model, batches)
        # How far two exact trainings drift: the same start in f64 (the test allows 1%).
        torch.manual_seed(0)
        model64 = make()
        model64.load_state_dict(initial)
        losses64 = train(model64, batches, torch.float64)
        drift = max(abs(a - b) / abs(b) for a, b in zip(losses, losses64))
        tensors = dict(initial)
        tensors["losses"] = torch.tensor(losses, dtype=torch.float64)
        path = os.path.join(out_dir, name + ".safetensors")
        write_safetensors(path, tensors, dict(meta, model=name, steps=str(STEPS)))
        print(f"{name:5s} loss {losses[0]:.4f} -> {losses[-1]:.4f}; f32 vs f64 drift {drift:.2e}; "
              f"{os.path.getsize(path) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
