/* ddltrace microbenchmark kernels: compiled with the system C compiler, loaded with ctypes.
 *
 * The canonical feed-forward loop of Yan et al. (Figure 5): y_i += w_ij * a_j (C_muladd), a_i = f(y_i) (C_act),
 * the error terms' derivative (C_err); STREAM's Copy, Scale, Add, Triad plus a pure read (sum) and a pure write
 * (fill); a dependent integer add chain that counts core cycles.  No -ffast-math: the literal loop's reduction
 * stays a chain of dependent adds, as the paper's code is.
 */
#include <math.h>
#include <stddef.h>

#define FEEDFORWARD(T, SUF, EXP, TANH)                                                              \
    void muladd_loop_##SUF(const T *w, const T *a, T *y, long n_out, long n_in) {                  \
        for (long i = 0; i < n_out; i++) {                                                          \
            T s = y[i];                                                                             \
            const T *row = w + i * n_in;                                                            \
            for (long j = 0; j < n_in; j++) s += row[j] * a[j];                                     \
            y[i] = s;                                                                               \
        }                                                                                           \
    }                                                                                               \
    void act_sigmoid_##SUF(const T *y, T *out, long n) {                                            \
        for (long i = 0; i < n; i++) out[i] = (T)1 / ((T)1 + EXP(-y[i]));                           \
    }                                                                                               \
    void act_tanh_##SUF(const T *y, T *out, long n) {                                               \
        for (long i = 0; i < n; i++) out[i] = TANH(y[i]);                                           \
    }                                                                                               \
    void err_sigmoid_##SUF(const T *a, const T *s, T *d, long n) {                                  \
        for (long i = 0; i < n; i++) d[i] = s[i] * a[i] * ((T)1 - a[i]);                            \
    }                                                                                               \
    void err_tanh_##SUF(const T *a, const T *s, T *d, long n) {                                     \
        for (long i = 0; i < n; i++) d[i] = s[i] * ((T)1 - a[i] * a[i]);                            \
    }

FEEDFORWARD(double, f64, exp, tanh)
FEEDFORWARD(float, f32, expf, tanhf)

void stream_copy(double *restrict c, const double *restrict a, long n) {
    for (long i = 0; i < n; i++) c[i] = a[i];
}
void stream_scale(double *restrict b, const double *restrict c, double q, long n) {
    for (long i = 0; i < n; i++) b[i] = q * c[i];
}
void stream_add(double *restrict c, const double *restrict a, const double *restrict b, long n) {
    for (long i = 0; i < n; i++) c[i] = a[i] + b[i];
}
void stream_triad(double *restrict a, const double *restrict b, const double *restrict c, double q, long n) {
    for (long i = 0; i < n; i++) a[i] = b[i] + q * c[i];
}
double stream_sum(const double *restrict a, long n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    long i = 0;
    for (; i + 4 <= n; i += 4) { s0 += a[i]; s1 += a[i + 1]; s2 += a[i + 2]; s3 += a[i + 3]; }
    for (; i < n; i++) s0 += a[i];
    return s0 + s1 + s2 + s3;
}
void stream_fill(double *restrict a, double q, long n) {
    for (long i = 0; i < n; i++) a[i] = q;
}

/* 100 dependent integer adds per iteration: one core cycle each on every x86-64 and AArch64 core. */
long add_chain(long iters) {
    long x = 0, one = 1;
    for (long k = 0; k < iters; k++) {
#if defined(__x86_64__)
#define ADD10 "add %1, %0\n\t" "add %1, %0\n\t" "add %1, %0\n\t" "add %1, %0\n\t" "add %1, %0\n\t" \
              "add %1, %0\n\t" "add %1, %0\n\t" "add %1, %0\n\t" "add %1, %0\n\t" "add %1, %0\n\t"
        __asm__ volatile(ADD10 ADD10 ADD10 ADD10 ADD10 ADD10 ADD10 ADD10 ADD10 ADD10 : "+r"(x) : "r"(one));
#elif defined(__aarch64__)
#define ADD10 "add %0, %0, %1\n\t" "add %0, %0, %1\n\t" "add %0, %0, %1\n\t" "add %0, %0, %1\n\t" \
              "add %0, %0, %1\n\t" "add %0, %0, %1\n\t" "add %0, %0, %1\n\t" "add %0, %0, %1\n\t" \
              "add %0, %0, %1\n\t" "add %0, %0, %1\n\t"
        __asm__ volatile(ADD10 ADD10 ADD10 ADD10 ADD10 ADD10 ADD10 ADD10 ADD10 ADD10 : "+r"(x) : "r"(one));
#else
        return -1;
#endif
    }
    return x;
}
