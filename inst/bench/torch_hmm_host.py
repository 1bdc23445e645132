# The torch HMM peers (../shared/peers/torch_hmm.py, categorical, and
# torch_hmm_gaussian.py here) timed as an R or Python user meets them: the
# sequences start in host memory and the results end there. Each timed call
# copies the model and the observations to the GPU, runs the pass, and
# copies its results back (forward: log-likelihoods; Viterbi: paths and
# their log-probabilities; Baum-Welch: the next model and the
# log-likelihoods). The copies are as small as the peer can make them:
# symbols cross as uint8 or int16 and are widened to int64 on the device,
# paths come back as uint8 or int16. Wall time (time.perf_counter around a
# synchronised call), median of 5 after a warm-up.
# Usage: python3 torch_hmm_host.py categorical N M T V
#        python3 torch_hmm_host.py gaussian N M T
import sys, time, torch
import torch_hmm
import torch_hmm_gaussian as tg

def wall(fn, reps=5):
    fn(); torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); torch.cuda.synchronize(); ts.append(1e3 * (time.perf_counter() - t0))
    ts.sort(); return ts[len(ts) // 2]

def narrow(bound):
    return torch.uint8 if bound <= 256 else torch.int16 if bound <= 32768 else torch.int64

def to_host_path(path, N):
    # Paths as the fewest bytes that hold the states, narrowed on the device.
    small = torch.uint8 if N <= 256 else torch.int16
    return path.to(small).cpu()

def categorical(N, M, T, V):
    torch.manual_seed(0)
    dt = torch.float64
    A = torch.rand(N, N, dtype=dt); A /= A.sum(1, keepdim=True)
    B = torch.rand(N, V, dtype=dt); B /= B.sum(1, keepdim=True)
    pi = torch.full((N,), 1.0 / N, dtype=dt)
    O = torch.randint(0, V, (M, T)).to(narrow(V))
    dev = "cuda"
    def up():
        return pi.to(dev), A.to(dev), B.to(dev), O.to(dev).long()
    def fwd():
        p, a, b, o = up()
        return torch_hmm.forward(p, a, b, o)[1].cpu()
    def vit():
        p, a, b, o = up()
        best, path = torch_hmm.viterbi(p, a, b, o)
        return best.cpu(), to_host_path(path, N)
    def bw():
        p, a, b, o = up()
        return [x.cpu() for x in torch_hmm.baum_welch_step(p, a, b, o)]
    tf, tv, tb = wall(fwd), wall(vit), wall(bw)
    print(f"torch_hmm from host N={N} M={M} T={T} V={V}: forward {tf:.2f} ms, viterbi {tv:.2f} ms, baum-welch iter {tb:.2f} ms")

def gaussian(N, M, T):
    torch.manual_seed(0)
    host = tg.random_model(N, M, T, "cpu")
    dev = "cuda"
    def up():
        return [x.to(dev) for x in host]
    def fwd():
        return tg.forward(*up())[1].cpu()
    def vit():
        best, path = tg.viterbi(*up())
        return best.cpu(), to_host_path(path, N)
    def bw():
        return [x.cpu() for x in tg.baum_welch_step(*up())]
    tf, tv, tb = wall(fwd), wall(vit), wall(bw)
    print(f"torch_hmm_gaussian from host N={N} M={M} T={T}: forward {tf:.2f} ms, viterbi {tv:.2f} ms, baum-welch iter {tb:.2f} ms")

if __name__ == "__main__":
    kind, args = sys.argv[1], [int(v) for v in sys.argv[2:]]
    categorical(*args) if kind == "categorical" else gaussian(*args)
