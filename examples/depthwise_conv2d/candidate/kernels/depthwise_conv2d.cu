// Depthwise 3x3 conv, stride 1, zero padding 1, with bias, NCHW fp32:
//   out[p][y][x] = bias[c] + sum_{ky,kx} w[c][ky][kx] * in[p][y+ky-1][x+kx-1],  p = n*C + c.
// Memory bound (9 FMA per 8 bytes), so the goal is to touch each input element once:
// one warp owns a strip of kRows output rows x 128 columns (4 per lane, float4 when aligned) and walks
// its input rows top to bottom. Each input row is split into three horizontal 3-tap products, added to
// the rolling accumulators of the three output rows it feeds; left/right neighbours come from the
// adjacent lanes by shuffle, so no shared memory and no re-reads except 2 halo rows per strip.
#include <cuda_runtime.h>
#include <cstdint>

constexpr int kWarpsPerBlock = 8;
constexpr int kRows = 16;       // output rows per warp strip: 18 input rows read per 16 written
constexpr int kTileW = 128;     // columns per warp: 32 lanes x 4

struct Row {
    float4 v;    // columns x .. x+3
    float halo;  // lane 0: column xw-1, lane 31: column xw+128 (the warp's outer neighbours)
};

// One input row as this lane sees it; zeros outside the image (that is the padding).
template <bool VEC>
__device__ __forceinline__ Row load_row(const float* __restrict__ plane, int r, int H, int W, int xw, int lane) {
    Row row{make_float4(0.f, 0.f, 0.f, 0.f), 0.f};
    if (r < 0 || r >= H) return row;
    const float* src = plane + (int64_t)r * W;
    const int x = xw + lane * 4;
    if (VEC) {
        if (x < W) row.v = __ldg(reinterpret_cast<const float4*>(src + x));  // W % 4 == 0: all 4 in or out
    } else {
        if (x < W) row.v.x = __ldg(src + x);
        if (x + 1 < W) row.v.y = __ldg(src + x + 1);
        if (x + 2 < W) row.v.z = __ldg(src + x + 2);
        if (x + 3 < W) row.v.w = __ldg(src + x + 3);
    }
    if (lane == 0 && xw > 0) row.halo = __ldg(src + xw - 1);
    if (lane == 31 && xw + kTileW < W) row.halo = __ldg(src + xw + kTileW);
    return row;
}

// acc += 3-tap horizontal product of one input row with one weight row (k0, k1, k2).
__device__ __forceinline__ void tap3(float4& acc, float l, const float4& v, float r, float k0, float k1, float k2) {
    acc.x = fmaf(k2, v.y, fmaf(k1, v.x, fmaf(k0, l, acc.x)));
    acc.y = fmaf(k2, v.z, fmaf(k1, v.y, fmaf(k0, v.x, acc.y)));
    acc.z = fmaf(k2, v.w, fmaf(k1, v.z, fmaf(k0, v.y, acc.z)));
    acc.w = fmaf(k2, r, fmaf(k1, v.w, fmaf(k0, v.z, acc.w)));
}

template <bool VEC>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
dwconv3x3(const float* __restrict__ in, const float* __restrict__ weight, const float* __restrict__ bias,
          float* __restrict__ out, int64_t planes, int C, int H, int W, int64_t strips, int64_t tiles_x) {
    const int lane = threadIdx.x & 31;
    const int64_t gw = (int64_t)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
    if (gw >= planes * tiles_x * strips) return;  // whole warps leave together: shuffles below stay full-warp
    // Strips of one plane are adjacent warps (mostly one block), so shared halo rows hit in L1.
    const int64_t strip = gw % strips;
    const int xw = (int)((gw / strips) % tiles_x) * kTileW;
    const int64_t p = gw / (strips * tiles_x);
    const int c = (int)(p % C);

    float k[9];
#pragma unroll
    for (int i = 0; i < 9; ++i) k[i] = __ldg(weight + c * 9 + i);
    const float b = __ldg(bias + c);
    const float4 b4 = make_float4(b, b, b, b);

    const float* src = in + p * H * W;
    float* dst = out + p * H * W;
    const int x = xw + lane * 4;
    const int y0 = (int)strip * kRows;
    const int y1 = min(y0 + kRows, H);  // this strip writes output rows [y0, y1)

    // Before reading input row r: acc_a holds output row r-1 (missing its last tap row), acc_b row r.
    float4 acc_a = b4, acc_b = b4;
    Row cur = load_row<VEC>(src, y0 - 1, H, W, xw, lane);
    for (int r = y0 - 1; r <= y1; ++r) {
        // Next row's loads go out before this row's math, to keep more bytes in flight.
        const Row nxt = r < y1 ? load_row<VEC>(src, r + 1, H, W, xw, lane) : Row{make_float4(0.f, 0.f, 0.f, 0.f), 0.f};
        float l = __shfl_up_sync(0xffffffffu, cur.v.w, 1);
        float rr = __shfl_down_sync(0xffffffffu, cur.v.x, 1);
        if (lane == 0) l = cur.halo;
        if (lane == 31) rr = cur.halo;

        float4 acc_c = b4;                               // output row r+1: input row r is its top row
        tap3(acc_c, l, cur.v, rr, k[0], k[1], k[2]);
        tap3(acc_b, l, cur.v, rr, k[3], k[4], k[5]);     // output row r: middle row
        tap3(acc_a, l, cur.v, rr, k[6], k[7], k[8]);     // output row r-1: bottom row, now complete
        if (r - 1 >= y0) {                               // warp-uniform
            float* o = dst + (int64_t)(r - 1) * W;
            if (VEC) {
                if (x < W) __stcs(reinterpret_cast<float4*>(o + x), acc_a);  // streaming: measured faster here
            } else {
                if (x < W) o[x] = acc_a.x;
                if (x + 1 < W) o[x + 1] = acc_a.y;
                if (x + 2 < W) o[x + 2] = acc_a.z;
                if (x + 3 < W) o[x + 3] = acc_a.w;
            }
        }
        acc_a = acc_b;
        acc_b = acc_c;
        cur = nxt;
    }
}

extern "C" void depthwise_conv3x3(const float* x, const float* weight, const float* bias, float* y,
                                  int64_t n, int64_t c, int64_t h, int64_t w, cudaStream_t stream) {
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0) return;
    const int64_t planes = n * c;
    const int64_t strips = (h + kRows - 1) / kRows;
    const int64_t tiles_x = (w + kTileW - 1) / kTileW;
    const int64_t warps = planes * strips * tiles_x;
    const unsigned blocks = (unsigned)((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
    const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y);
    const bool vec = w % 4 == 0 && (addr & 15) == 0;  // then every row start is 16-byte aligned too
    if (vec)
        dwconv3x3<true><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(x, weight, bias, y, planes, (int)c, (int)h, (int)w, strips, tiles_x);
    else
        dwconv3x3<false><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(x, weight, bias, y, planes, (int)c, (int)h, (int)w, strips, tiles_x);
}
