"""A DCGAN (the classic example's shape, small): a generator of ConvTranspose2d +
BatchNorm2d + ReLU + Tanh and a discriminator of Conv2d + LeakyReLU + Sigmoid, the
DCGAN weights_init through Module.apply, BCELoss, two Adam optimizers with
betas=(0.5, 0.999), fake.detach() for the discriminator's step, a gradient hook that
clamps the generator's output gradient (Tensor.register_hook) and a module backward
hook that records the generator's first-layer grad_output norms
(register_full_backward_hook). Written against torch; test_compat runs it with
kiln in torch's place."""


def dcgan_build(torch):
    nn = torch.nn

    def weights_init(m):
        classname = m.__class__.__name__
        if classname.find("Conv") != -1:
            nn.init.normal_(m.weight.data, 0.0, 0.02)
        elif classname.find("BatchNorm") != -1:
            nn.init.normal_(m.weight.data, 1.0, 0.02)
            nn.init.constant_(m.bias.data, 0)

    class GAN(nn.Module):
        def __init__(self, nz=8, ngf=16, ndf=8):
            super().__init__()
            self.G = nn.Sequential(
                nn.ConvTranspose2d(nz, ngf, 4, 1, 0, bias=False),
                nn.BatchNorm2d(ngf),
                nn.ReLU(True),
                nn.ConvTranspose2d(ngf, 1, 4, 2, 1, bias=False),
                nn.Tanh())
            self.D = nn.Sequential(
                nn.Conv2d(1, ndf, 4, 2, 1, bias=False),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(ndf, 1, 4, 1, 0, bias=False),
                nn.Sigmoid())
            self.G.apply(weights_init)
            self.D.apply(weights_init)

    return GAN()


def dcgan_train(torch, model, data):
    G, D = model.G, model.D
    criterion = torch.nn.BCELoss()
    opt_d = torch.optim.Adam(D.parameters(), lr=2e-3, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(G.parameters(), lr=2e-3, betas=(0.5, 0.999))
    real = torch.tensor(data["real"])
    norms = []
    handle = G[0].register_full_backward_hook(
        lambda m, grad_input, grad_output: norms.append(grad_output[0].norm().item()))
    losses = []
    for z in data["noise"]:
        z = torch.tensor(z)
        D.zero_grad()
        out_real = D(real).view(-1)
        err_real = criterion(out_real, torch.ones_like(out_real))
        err_real.backward()
        fake = G(z)
        fake.register_hook(lambda g: g.clamp(-1e-3, 1e-3))
        out_fake = D(fake.detach()).view(-1)
        err_fake = criterion(out_fake, torch.zeros_like(out_fake))
        err_fake.backward()
        opt_d.step()
        G.zero_grad()
        out = D(fake).view(-1)
        err_g = criterion(out, torch.ones_like(out))
        err_g.backward()
        opt_g.step()
        losses += [err_real.item() + err_fake.item(), err_g.item()]
    handle.remove()
    assert len(norms) == len(data["noise"])
    return losses + norms
