// The floor of a dependent chain of products at the batched forward pass's
// shape: cuBLAS DGEMM, M sequences x N states, T products X_t = X_{t-1} A
// (no scaling, no emissions), timed as stream launches and as one CUDA
// graph, against the same T products made independent (one strided-batched
// call). Build and run on a GPU host:
//   nvcc -O2 -arch=sm_90 cublas_dgemm_chain.cu -lcublas -o dgemm_chain
//   ./dgemm_chain 64 1024 256
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#define CK(x) do { auto e = (x); if (e != 0) { printf("error %d at %s:%d\n", (int)e, __FILE__, __LINE__); exit(1); } } while (0)

int main(int argc, char** argv) {
    int M = atoi(argv[1]), N = atoi(argv[2]), T = atoi(argv[3]);
    std::vector<double> a((size_t)N * N), x((size_t)M * N);
    srand(1);
    for (int i = 0; i < N; ++i) { double s = 0; for (int j = 0; j < N; ++j) { double v = rand() / (double)RAND_MAX; a[(size_t)j * N + i] = v; s += v; } for (int j = 0; j < N; ++j) a[(size_t)j * N + i] /= s; }
    for (auto& v : x) v = rand() / (double)RAND_MAX;
    double *dA, *dX, *dY, *dB;
    CK(cudaMalloc(&dA, sizeof(double) * N * N));
    CK(cudaMalloc(&dX, sizeof(double) * M * N));
    CK(cudaMalloc(&dY, sizeof(double) * M * N));
    CK(cudaMalloc(&dB, sizeof(double) * (size_t)M * N * T));
    CK(cudaMemcpy(dA, a.data(), sizeof(double) * N * N, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dX, x.data(), sizeof(double) * M * N, cudaMemcpyHostToDevice));
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cublasHandle_t h; CK(cublasCreate(&h)); CK(cublasSetStream(h, s));
    const double one = 1, zero = 0;
    auto chain = [&]() { for (int t = 0; t < T; ++t) { double* in = t % 2 ? dY : dX; double* out = t % 2 ? dX : dY; CK(cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, N, &one, in, M, dA, N, &zero, out, M)); } };
    auto batched = [&]() { CK(cublasDgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, N, &one, dX, M, 0, dA, N, 0, &zero, dB, M, (long long)M * N, T)); };
    chain(); batched(); CK(cudaStreamSynchronize(s));
    cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal)); chain(); CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    auto time = [&](auto f) { std::vector<float> ms; for (int r = 0; r < 7; ++r) { cudaEventRecord(e0, s); f(); cudaEventRecord(e1, s); cudaEventSynchronize(e1); float m; cudaEventElapsedTime(&m, e0, e1); ms.push_back(m); } std::sort(ms.begin(), ms.end()); return ms; };
    double flop = 2.0 * M * (double)N * N * T;
    auto show = [&](const char* what, std::vector<float> ms) { printf("M=%d N=%d T=%d %-34s median %.3f ms (min %.3f max %.3f), %.2f us a product, %.1f TFLOP/s\n", M, N, T, what, ms[3], ms[0], ms[6], 1e3 * ms[3] / T, flop / (ms[3] * 1e-3) / 1e12); };
    show("chain, stream launches", time(chain));
    show("chain, one CUDA graph", time([&] { CK(cudaGraphLaunch(ge, s)); }));
    show("independent, strided-batched", time(batched));
    return 0;
}
