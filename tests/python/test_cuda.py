"""CUDA tensors through the fosd package (skipped unless torch sees a GPU and a cuda fosd starts):
every op gives the same bits for CUDA tensors as for CPU tensors, results on the input's GPU, with
shared memory and inline; fosd.torch.Linear on CUDA trains like on the CPU, bit for bit; and a
cuda fosd's layer equals `fos linear --local --backend cuda`."""

import numpy as np
import pytest
import torch

import fosd
import fosd.torch as ft
from conftest import bits, load_bf16, save_bf16

if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA GPU", allow_module_level=True)


@pytest.fixture(params=[True, False], ids=["shm", "inline"])
def cclient(cuda_server, request):
    c = fosd.connect(cuda_server.url, shm=request.param, timeout=120)
    yield c
    c.close()


def rand(g, *shape, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16)


def same(a, b, what):
    assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
    assert a.dtype == b.dtype and a.shape == b.shape, what
    assert np.array_equal(bits(a), bits(b)), what


def test_ops_same_bits_cuda_and_cpu(cclient):
    g = torch.Generator().manual_seed(11)
    M, N, K = 256, 256, 512
    x, w, b, dy = rand(g, M, K), rand(g, N, K, scale=0.05), rand(g, N), rand(g, M, N)
    dev = torch.device("cuda")
    cpu = cclient.linear(x, w, dy=dy, bias=b)
    gpu = cclient.linear(x.to(dev), w.to(dev), dy=dy.to(dev), bias=b.to(dev))
    for k in cpu:
        assert gpu[k].device.type == "cuda", k
        same(gpu[k].cpu(), cpu[k], "linear " + k)
    # float32 CUDA input rounds on the GPU to the same bf16
    same(cclient.linear(x.float().to(dev), w.to(dev), bias=b.float().to(dev))["y"].cpu(), cpu["y"], "float32 x")
    cclient.put_weight("cu.w", w.to(dev))
    y1, c1 = cclient.forward("cu.w", x, bias=b, save_context=True)
    y2, c2 = cclient.forward("cu.w", x.to(dev), bias=b.to(dev), save_context=True)
    same(y2.cpu(), y1, "forward y")
    for r1, r2, k in zip(cclient.backward(c1, dy), cclient.backward(c2, dy.to(dev)), ("dx", "dw", "db")):
        assert r2.device.type == "cuda"
        same(r2.cpu(), r1, "backward " + k)
    q1 = cclient.quantize(x)
    q2 = cclient.quantize(x.to(dev))
    for a, bb, k in zip(q2, q1, ("codes", "scales", "amax")):
        assert a.device.type == "cuda"
        same(a.cpu(), bb, "quantize " + k)
    same(cclient.dequantize(*q2).cpu(), cclient.dequantize(*q1), "dequantize")
    cclient.drop_weight("cu.w")


def test_linear_module_on_cuda(cclient):
    """The same fosd.torch model on CUDA and on the CPU: the same parameters after three SGD steps,
    bit for bit (the losses are torch's reductions, whose order differs between devices)."""
    torch.manual_seed(3)
    cpu = torch.nn.Sequential(ft.Linear(256, 512, dtype=torch.bfloat16, client=cclient), torch.nn.ReLU(),
                              ft.Linear(512, 256, dtype=torch.bfloat16, client=cclient, override="high_precision"))
    gpu = torch.nn.Sequential(ft.Linear(256, 512, dtype=torch.bfloat16, client=cclient, device="cuda"), torch.nn.ReLU(),
                              ft.Linear(512, 256, dtype=torch.bfloat16, client=cclient, override="high_precision", device="cuda"))
    gpu.load_state_dict(cpu.state_dict())
    g = torch.Generator().manual_seed(4)
    x, t = rand(g, 4, 64, 256), rand(g, 4, 64, 256)
    oc = torch.optim.SGD(cpu.parameters(), lr=0.5)
    og = torch.optim.SGD(gpu.parameters(), lr=0.5)
    for step in range(3):
        for model, opt, dev in ((cpu, oc, "cpu"), (gpu, og, "cuda")):
            opt.zero_grad()
            loss = (model(x.to(dev)).float() - t.to(dev).float()).pow(2).mean()
            loss.backward()
            opt.step()
            model.loss = loss.item()
        assert abs(cpu.loss - gpu.loss) <= 1e-5 * abs(cpu.loss), step
    for (n, p), q in zip(cpu.named_parameters(), gpu.parameters()):
        assert q.device.type == "cuda"
        same(q.detach().cpu(), p.detach(), n)


def test_matches_cli_local_cuda(cuda_server, tmp_path):
    import subprocess
    from conftest import build_dir
    import os
    g = torch.Generator().manual_seed(5)
    M, N, K = 256, 256, 256
    x, w, b, dy = rand(g, M, K), rand(g, N, K, scale=0.05), rand(g, N), rand(g, M, N)
    for n, t in (("x", x), ("w", w), ("b", b), ("dy", dy)):
        save_bf16(tmp_path / (n + ".npy"), t)
    subprocess.run([os.path.join(build_dir(), "fos"), "linear", tmp_path / "x.npy", tmp_path / "w.npy", "--bias",
                    tmp_path / "b.npy", "--dy", tmp_path / "dy.npy", "--out", tmp_path / "ref", "--local",
                    "--backend", "cuda"], check=True, capture_output=True)
    with fosd.connect(cuda_server.url) as c:
        layer = ft.Linear(K, N, dtype=torch.bfloat16, client=c, device="cuda")
        with torch.no_grad():
            layer.weight.copy_(w)
            layer.bias.copy_(b)
        xg = x.cuda().requires_grad_(True)
        y = layer(xg)
        y.backward(dy.cuda())
        for got, k in ((y.detach(), "y"), (xg.grad, "dx"), (layer.weight.grad, "dw"), (layer.bias.grad, "db")):
            same(got.cpu(), load_bf16(tmp_path / "ref" / (k + ".npy")), k)
