"""numpy reference of PowerSGD's step (PyTorch's powerSGD_hook), for tests.

Every replica r holds E_r (per tensor, error feedback) and all hold the same
Q per compressed tensor (warm start). One step over W replicas' gradients:

    M_r = g_r + E_r
    step <= start_iter, or any M_r not finite:  sum = sum_r M_r  (E, Q: E_r = 0,
                                                 or unchanged if not finite)
    else, per compressed tensor (n x m, last dimension m):
        P = sum_r M_r Q;   P^ = gram_schmidt(P)
        Qs = sum_r M_r^T P^;  sum = P^ Qs^T;  Q <- Qs / W;  E_r = M_r - sum / W
    every other tensor: sum = sum_r M_r, E_r = 0
"""
import numpy as np


def matrix_shape(shape):
    return int(np.prod(shape[:-1])), int(shape[-1])


def compresses(shape, rank, rate):
    if len(shape) < 2:
        return False
    n, m = matrix_shape(shape)
    return (n + m) * rank * rate < n * m


def gram_schmidt(p):
    p = p.astype(np.float32).copy()
    for i in range(p.shape[1]):
        norm = np.float32(np.linalg.norm(p[:, i]))
        p[:, i] = p[:, i] / norm if norm > 0 else 0
        for j in range(i + 1, p.shape[1]):
            p[:, j] -= np.sum(p[:, i] * p[:, j]) * p[:, i]
    return p


class PowerSGDReference:
    def __init__(self, shapes, replicas, rank, start_iter=0, rate=2.0, initial_q=None):
        self.shapes = [tuple(s) for s in shapes]
        self.W, self.rank, self.start_iter, self.rate = replicas, rank, start_iter, rate
        self.step = 0
        self.errors = [[np.zeros(s, np.float32) for s in self.shapes] for _ in range(replicas)]
        self.q = {i: np.asarray(initial_q[i], np.float32) for i in range(len(shapes))
                  if compresses(self.shapes[i], rank, rate)}

    def compressed(self, i):
        return i in self.q

    def __call__(self, grads):
        """grads[r][i]: replica r's gradient i. Returns the sums, per tensor."""
        self.step += 1
        ms = [[g.astype(np.float32) + e for g, e in zip(gs, es)]
              for gs, es in zip(grads, self.errors)]
        bad = any(not np.all(np.isfinite(m)) for mr in ms for m in mr)
        dense = self.step <= self.start_iter or bad
        sums = []
        for i, shape in enumerate(self.shapes):
            if dense or not self.compressed(i):
                total = ms[0][i].copy()
                for r in range(1, self.W):
                    total = total + ms[r][i]
                sums.append(total)
                if not bad:
                    for r in range(self.W):
                        self.errors[r][i] = np.zeros(shape, np.float32)
                continue
            n, m = matrix_shape(shape)
            mats = [ms[r][i].reshape(n, m) for r in range(self.W)]
            p = sum(mat @ self.q[i] for mat in mats)
            p_hat = gram_schmidt(p)
            qs = sum(mat.T @ p_hat for mat in mats)
            total = p_hat @ qs.T
            self.q[i] = qs / self.W
            for r in range(self.W):
                self.errors[r][i] = (mats[r] - total / self.W).reshape(shape)
            sums.append(total.reshape(shape))
        return sums
