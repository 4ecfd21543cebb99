"""Training programs written in PyTorch's idiom against a module named `torch` (the
real torch or kiln): each builds its model with build(torch) and trains with
train(torch, model, data), returning per-step losses. The test copies torch's initial
weights into kiln's model and compares losses and final weights."""

import math


# ---- a CNN classifier with BatchNorm (the MNIST example's shape, smaller)

def cnn_build(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 8, 3, 1, padding=1)
            self.bn1 = nn.BatchNorm2d(8)
            self.conv2 = nn.Conv2d(8, 16, 3, 1)
            self.bn2 = nn.BatchNorm2d(16)
            self.dropout1 = nn.Dropout2d(0.0)
            self.pool = nn.AdaptiveAvgPool2d((2, 2))
            self.fc1 = nn.Linear(64, 32)
            self.fc2 = nn.Linear(32, 10)

        def forward(self, x):
            x = F.relu(self.bn1(self.conv1(x)))
            x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
            x = self.dropout1(x)
            x = torch.flatten(self.pool(x), 1)
            x = F.relu(self.fc1(x))
            return F.log_softmax(self.fc2(x), dim=1)

    return Net()


def cnn_train(torch, model, data):
    F = torch.nn.functional
    x, y = torch.tensor(data["x"]), torch.tensor(data["y"])
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    losses = []
    for epoch in range(3):
        model.train()
        for data_, target in loader:
            optimizer.zero_grad()
            loss = F.nll_loss(model(data_), target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
        model.eval()
        test_loss, correct = 0.0, 0
        with torch.no_grad():
            for data_, target in loader:
                output = model(data_)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                pred = output.argmax(dim=1, keepdim=True)
                correct += pred.eq(target.view_as(pred)).sum().item()
        losses += [test_loss / len(loader.dataset), float(correct)]
    return losses


# ---- an LSTM language model (the word_language_model example's shape), checkpointed

def lstm_build(torch):
    nn = torch.nn

    class RNNModel(nn.Module):
        def __init__(self, ntoken=20, ninp=8, nhid=12, nlayers=2, dropout=0.0):
            super().__init__()
            self.ntoken = ntoken
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)
            self.nhid, self.nlayers = nhid, nlayers
            initrange = 0.1
            nn.init.uniform_(self.encoder.weight, -initrange, initrange)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -initrange, initrange)

        def forward(self, input, hidden):
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            output = self.drop(output)
            decoded = self.decoder(output).view(-1, self.ntoken)
            return torch.nn.functional.log_softmax(decoded, dim=1), hidden

        def init_hidden(self, bsz):
            weight = next(self.parameters())
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))

    return RNNModel()


def lstm_train(torch, model, data):
    def batchify(d, bsz):
        nbatch = d.size(0) // bsz
        d = d.narrow(0, 0, nbatch * bsz)
        return d.view(bsz, -1).t().contiguous()

    def get_batch(source, i, bptt=5):
        seq_len = min(bptt, len(source) - 1 - i)
        return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].view(-1)

    def repackage_hidden(h):
        if isinstance(h, torch.Tensor):
            return h.detach()
        return tuple(repackage_hidden(v) for v in h)

    train_data = batchify(torch.tensor(data["tokens"]), 4)
    criterion = torch.nn.NLLLoss()
    lr, losses = 2.0, []
    for epoch in range(2):
        model.train()
        hidden = model.init_hidden(4)
        for i in range(0, train_data.size(0) - 1, 5):
            inputs, targets = get_batch(train_data, i)
            model.zero_grad()
            hidden = repackage_hidden(hidden)
            output, hidden = model(inputs, hidden)
            loss = criterion(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            losses.append(loss.item())
        path = data["checkpoint"] + f".{torch.__name__}"
        with open(path, "wb") as f:
            torch.save(model.state_dict(), f)
        with open(path, "rb") as f:
            model.load_state_dict(torch.load(f))
        lr /= 4.0
    return losses


# ---- a GPT (nanoGPT's model and training-loop idiom, tiny)

def gpt_build(torch):
    nn = torch.nn
    F = torch.nn.functional
    block_size, n_embd, n_head, vocab = 8, 16, 2, 11

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)
            self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                                 .view(1, 1, block_size, block_size))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
            q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
            v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(n_embd)
            self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                     nn.Linear(4 * n_embd, n_embd))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab, n_embd), wpe=nn.Embedding(block_size, n_embd),
                h=nn.ModuleList([Block() for _ in range(2)]), ln_f=nn.LayerNorm(n_embd)))
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # weight tying
            self.apply(self._init_weights)

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            b, t = idx.size()
            pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
            x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            for block in self.transformer.h:
                x = block(x)
            logits = self.lm_head(self.transformer.ln_f(x))
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)
            return logits, loss

        def configure_optimizers(self, weight_decay, learning_rate, betas):
            params = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
            decay = [p for n, p in params.items() if p.dim() >= 2]
            nodecay = [p for n, p in params.items() if p.dim() < 2]
            groups = [{"params": decay, "weight_decay": weight_decay},
                      {"params": nodecay, "weight_decay": 0.0}]
            return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)

    return GPT()


def gpt_train(torch, model, data):
    tokens = torch.tensor(data["tokens"])
    optimizer = model.configure_optimizers(0.1, 6e-3, (0.9, 0.95))
    step_model = torch.compile(model) if hasattr(torch, "compile") else model
    warmup, max_iters, losses = 3, 12, []

    def get_lr(it):
        if it < warmup:
            return 6e-3 * (it + 1) / (warmup + 1)
        ratio = (it - warmup) / (max_iters - warmup)
        return 6e-4 + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (6e-3 - 6e-4)

    for it in range(max_iters):
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it)
        i = (it * 5) % (len(tokens) - 10)
        x = torch.stack([tokens[i + j:i + j + 8] for j in range(3)])
        y = torch.stack([tokens[i + j + 1:i + j + 9] for j in range(3)])
        _, loss = step_model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return losses


# ---- a super-resolution net (the super_resolution example's shape)

def superres_build(torch):
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self, upscale_factor=2):
            super().__init__()
            self.relu = nn.ReLU()
            self.conv1 = nn.Conv2d(1, 16, (5, 5), (1, 1), (2, 2))
            self.conv2 = nn.Conv2d(16, 16, (3, 3), (1, 1), (1, 1))
            self.conv3 = nn.Conv2d(16, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
            self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
            nn.init.orthogonal_(self.conv1.weight, nn.init.calculate_gain("relu"))
            nn.init.orthogonal_(self.conv2.weight, nn.init.calculate_gain("relu"))
            nn.init.orthogonal_(self.conv3.weight)

        def forward(self, x):
            x = self.relu(self.conv1(x))
            x = self.relu(self.conv2(x))
            return self.pixel_shuffle(self.conv3(x))

    return Net()


def superres_train(torch, model, data):
    lo, hi = torch.tensor(data["lo"]), torch.tensor(data["hi"])
    criterion = torch.nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.02, total_steps=8)
    losses = []
    for _ in range(8):
        optimizer.zero_grad()
        loss = criterion(model(lo), hi)
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    with torch.no_grad():
        mse = criterion(model(lo), hi)
        losses.append((10 * torch.log10(1 / mse)).item())
    return losses


# ---- a seq2seq Transformer (the translation tutorial's shape)

PAD = 0


def seq2seq_build(torch):
    nn = torch.nn
    vocab, d_model, max_len = 12, 16, 20

    class PositionalEncoding(nn.Module):
        def __init__(self):
            super().__init__()
            position = torch.arange(max_len).unsqueeze(1)
            div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            pe = torch.zeros(max_len, 1, d_model)
            pe[:, 0, 0::2] = torch.sin(position * div_term)
            pe[:, 0, 1::2] = torch.cos(position * div_term)
            self.register_buffer("pe", pe)

        def forward(self, x):
            return x + self.pe[:x.size(0)]

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_emb = nn.Embedding(vocab, d_model)
            self.tgt_emb = nn.Embedding(vocab, d_model)
            self.pos = PositionalEncoding()
            self.transformer = nn.Transformer(d_model, 2, 2, 2, 32, dropout=0.0)
            self.generator = nn.Linear(d_model, vocab)

        def forward(self, src, tgt):
            tgt_mask = self.transformer.generate_square_subsequent_mask(tgt.size(0))
            src_pad = (src == PAD).transpose(0, 1)
            tgt_pad = (tgt == PAD).transpose(0, 1)
            scale = math.sqrt(d_model)
            out = self.transformer(self.pos(self.src_emb(src) * scale),
                                   self.pos(self.tgt_emb(tgt) * scale), tgt_mask=tgt_mask,
                                   src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                                   memory_key_padding_mask=src_pad)
            return self.generator(out)

    return Seq2Seq()


def seq2seq_train(torch, model, data):
    src, tgt = torch.tensor(data["src"]), torch.tensor(data["tgt"])
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    noam = lambda step: 16 ** -0.5 * min((step + 1) ** -0.5, (step + 1) * 4 ** -1.5)  # noqa
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, noam)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.1)
    losses = []
    for _ in range(6):
        model.train()
        logits = model(src, tgt[:-1])
        optimizer.zero_grad()
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt[1:].reshape(-1))
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


# ---- a VAE (the VAE example's shape; its noise comes from data["noise"] so both runs
# draw the same numbers)

def vae_build(torch):
    nn = torch.nn
    F = torch.nn.functional

    class VAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(64, 32)
            self.fc21 = nn.Linear(32, 8)
            self.fc22 = nn.Linear(32, 8)
            self.fc3 = nn.Linear(8, 32)
            self.fc4 = nn.Linear(32, 64)
            self.randn_like = torch.randn_like

        def encode(self, x):
            h1 = F.relu(self.fc1(x))
            return self.fc21(h1), self.fc22(h1)

        def reparameterize(self, mu, logvar):
            std = torch.exp(0.5 * logvar)
            eps = self.randn_like(std)
            return mu + eps * std

        def decode(self, z):
            return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

        def forward(self, x):
            mu, logvar = self.encode(x.view(-1, 64))
            z = self.reparameterize(mu, logvar)
            return self.decode(z), mu, logvar

    return VAE()


def vae_train(torch, model, data):
    F = torch.nn.functional
    noise = iter(data["noise"])
    model.randn_like = lambda like: torch.tensor(next(noise))
    x = torch.tensor(data["x"])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(len(data["noise"])):
        optimizer.zero_grad()
        recon, mu, logvar = model(x)
        bce = F.binary_cross_entropy(recon, x.view(-1, 64), reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        loss = bce + kld
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
