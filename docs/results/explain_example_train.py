import kiln

def mlp(x, w1, b1, w2, b2):
    h = kiln.relu(x @ w1 + b1)
    return h @ w2 + b2

@kiln.compile
def fn(x, cond):
    a = kiln.sin(x)
    if cond.item():          # graph break: data-dependent control flow
        b = kiln.cos(a)
    else:
        b = kiln.tanh(a)
    return b + 1

x, w1, b1, w2, b2 = kiln.randn(128, 1), kiln.randn(1, 64), kiln.randn(64), kiln.randn(64, 1), kiln.randn(1)
for step in range(5):
    loss = (mlp(x, w1, b1, w2, b2) ** 2).mean()
    print(f"step {step}: loss {loss.item():.4f}")
for i in range(4):
    fn(kiln.randn(16), kiln.tensor(i % 2 == 0))
batches = [kiln.randn(n, 1) for n in (256, 256, 256)]
for xb in batches:                       # a new batch size: a guard fails, it recompiles
    loss = (mlp(xb, w1, b1, w2, b2) ** 2).mean().item()
print(kiln.explain())
