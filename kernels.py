"""
CPU fast paths: hand-written autograd kernels for the three operations where eager PyTorch on a CPU spends most of a
small model's step beyond its matmuls. model.py computes the same things with torch's own operations (F.rms_norm,
RoPE as its formula, F.cross_entropy), which is what a GPU and torch.compile run; a model built with
cpu_kernels=True calls these instead:

    fused_rms_norm    y = x * rsqrt(mean(x^2) + eps) * g in 2 ops forward and 4 backward (F.rms_norm's CPU
                      decomposition takes several more of each)
    rope_in_place     both halves written in place, no cat, no saved activations (a rotation's backward is the
                      rotation by the opposite angle)
    chunked_cross_entropy
                      cross-entropy and its gradient in one pass over the logits, chunk by chunk while a chunk is in
                      cache; the gradient is stored once in the logits' dtype (F.cross_entropy on logits.float()
                      makes several full-size passes, a large part of a step for a 50k vocabulary)

The switch is train.py's `cpu_kernels` (on by default, used in eager CPU runs only, recorded in config.json: a
resume with it changed is refused); every script that loads a run applies the run's setting (runs.load_model).
The choice is made where the model is built, `GPT(config, cpu_kernels=kernels.wanted(device, on))`: each module then
calls the function below or torch's own operation (model.py names each at its one call), never swapped later.
tests/test_kernels.py pins each fast path to the plain operation, values and gradients.
"""
import torch


def wanted(device, on=True):
    """Whether a model built for `device` takes the fast paths: asked for, and on a CPU (where they are faster)."""
    return bool(on) and torch.device(device).type == "cpu"


# -----------------------------------------------------------------------------------------------------------------
# RMSNorm


def fused_rms_norm(x, weight, eps):
    """F.rms_norm(x, (x.size(-1),), weight, eps), computed by _RMSNorm."""
    return _RMSNorm.apply(x, weight, eps)


class _RMSNorm(torch.autograd.Function):
    """y = x / sqrt(mean(x^2) + eps) * weight, computed in fp32 for bf16/fp16 inputs, output in x's dtype (as
    F.rms_norm). Backward, with xh = x*r and r = rsqrt(mean(x^2) + eps):
    dx = r * (g' - xh * mean(g' * xh)), g' = g * weight; dweight = sum over rows of g * xh."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        r = torch.linalg.vector_norm(xf, dim=-1, keepdim=True).square_().div_(x.size(-1)).add_(eps).rsqrt_()
        y = xf * r
        if weight is not None:
            y.mul_(weight)
        ctx.save_for_backward(x, r, weight)
        return y.to(x.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        x, r, weight = ctx.saved_tensors
        xh = x.to(r.dtype) * r
        g = g.to(r.dtype)
        dweight = None
        if weight is not None:
            if ctx.needs_input_grad[1]:
                dweight = (g * xh).flatten(0, -2).sum(0).to(weight.dtype)
            g = g * weight
        mean_gx = torch.linalg.vecdot(g, xh).unsqueeze(-1).div_(x.size(-1))
        return torch.addcmul(g, xh, mean_gx, value=-1).mul_(r).to(x.dtype), dweight, None


# -----------------------------------------------------------------------------------------------------------------
# RoPE


def rope_in_place(x, cos, sin):
    """model.apply_rope(x, cos, sin), computed by _RoPE."""
    return _RoPE.apply(x, cos.to(x.dtype), sin.to(x.dtype))


class _RoPE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return _rotate(x, cos, sin)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        cos, sin = ctx.saved_tensors
        return _rotate(g, cos, -sin), None, None


def _rotate(x, cos, sin):
    d = x.size(-1) // 2
    out = torch.empty_like(x)
    torch.mul(x[..., :d], cos, out=out[..., :d]).addcmul_(x[..., d:], sin, value=-1)
    torch.mul(x[..., d:], cos, out=out[..., d:]).addcmul_(x[..., :d], sin)
    return out


# -----------------------------------------------------------------------------------------------------------------
# cross-entropy


def chunked_cross_entropy(logits, targets, ignore_index=-1):
    """F.cross_entropy(logits.float(), targets, ignore_index=ignore_index), the mean over the kept targets, by
    _ChunkedCrossEntropy. logits: (N, V); targets: (N,)."""
    with_grad = torch.is_grad_enabled() and logits.requires_grad  # (ctx.needs_input_grad ignores no_grad)
    return _ChunkedCrossEntropy.apply(logits, targets, ignore_index, with_grad)


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Per row: loss = logsumexp(z) - z[target]; d loss / dz = softmax(z) - onehot(target), times 1/n_kept.
    The forward computes that gradient too, chunk by chunk in fp32 while the chunk is in cache, and stores it
    once in the logits' dtype. CPU only: its backward reads the incoming gradient on the host (free on a CPU, a
    sync on a GPU)."""

    @staticmethod
    def forward(ctx, logits, targets, ignore_index, with_grad):
        N, V = logits.shape
        keep = targets != ignore_index
        safe = torch.where(keep, targets, 0)
        fp = torch.promote_types(logits.dtype, torch.float32)
        scale = keep.to(fp) / keep.sum()  # (N,): 1/n_kept, 0 for ignored rows (nan if none is kept, as torch)
        picked = logits.gather(1, safe[:, None]).squeeze(1).to(fp)
        lse = torch.empty(N, dtype=fp, device=logits.device)
        grad = torch.empty_like(logits) if with_grad else None
        chunk_elems = 2 ** 18 * torch.get_num_threads()  # 1 MiB of fp32 per thread (L2)
        rows = max(1, min(N, chunk_elems // V))
        z = torch.empty(rows, V, dtype=fp, device=logits.device)
        flat_target = torch.arange(N, device=logits.device) % rows * V + safe  # target's index in z.view(-1)
        for i in range(0, N, rows):
            j = min(i + rows, N)
            zc = z[:j - i].copy_(logits[i:j])
            m = zc.amax(-1, keepdim=True)
            s = zc.sub_(m).exp_().sum(-1, keepdim=True)  # zc = exp(z - m)
            lse[i:j] = (m + s.log()).squeeze(1)
            if grad is not None:  # (softmax - onehot) * scale, in fp32 before rounding to the logits' dtype
                zc.mul_(scale[i:j, None] / s)
                zc.view(-1).index_add_(0, flat_target[i:j], scale[i:j], alpha=-1)
                grad[i:j] = zc
        ctx.save_for_backward(grad)
        return (torch.where(keep, lse - picked, 0.0) * scale).sum()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        grad, = ctx.saved_tensors
        return (grad if float(g) == 1.0 else grad * g), None, None, None
