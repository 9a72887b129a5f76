/* sparsert's C interface: open a compiled package (`sparsert compile`) and run it, from C or from any language with
 * a C foreign-function interface (Python's ctypes, Rust, Go). The library is libsparsert.so; the C++ interface
 * (sparsert/runtime/gpu_executor.hpp) is the same runtime.
 *
 * Every function that can fail returns a sparsert_status and, on failure, leaves a one-line message for
 * sparsert_last_error() on the calling thread. A network is used by one thread at a time; different networks may run
 * on different threads. Activations are float32. For a network of matrix layers they are row-major, one row per
 * feature: the input is [input_rows, n] and the output [output_rows, n] for a batch of n columns. For a network of
 * convolutions (sparsert_network_is_convolutional) they are n NCHW images: input_rows and output_rows are the floats
 * of one image, in and out. */
#ifndef SPARSERT_SPARSERT_H_
#define SPARSERT_SPARSERT_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define SPARSERT_API __attribute__((visibility("default")))
#else
#define SPARSERT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sparsert_status {
  SPARSERT_OK = 0,
  SPARSERT_FAILED = 1,     /* the work failed: a driver or kernel error, out of memory, an internal error */
  SPARSERT_BAD_INPUT = 2,  /* a bad argument, package or shape: the message names it */
  SPARSERT_NO_DEVICE = 3   /* "cuda" asked for where no CUDA driver or device is found */
} sparsert_status;

typedef struct sparsert_network sparsert_network;

/* The message of the calling thread's last call of a function returning a status, when it failed; "" when it
 * succeeded. Valid until the thread's next such call. */
SPARSERT_API const char* sparsert_last_error(void);
SPARSERT_API const char* sparsert_version(void);

/* Opens the package in directory `package` for `device`: "cuda" (the first GPU, or "cuda:N" the N-th; its kernels
 * loaded once, here), "cpu" (the CPU executor with `threads` threads, 0 for one per core; 0 to 1024, used on the
 * CPU only) or "auto" (cuda where a driver and a device are found, else cpu). *out is set on success only. The
 * calls on a "cuda" network leave the context that was current on the thread current. */
SPARSERT_API sparsert_status sparsert_network_open(const char* package, const char* device, int threads,
                                                   sparsert_network** out);
/* Frees the network and everything it holds; NULL is ignored. */
SPARSERT_API void sparsert_network_close(sparsert_network* net);

/* The rows of the input and of the output (the floats of one image, for convolutions), and the package's width:
 * the columns one GPU launch covers and the leading dimension (floats a row) of the buffers sparsert_network_enqueue
 * takes, or the most images one call (run or enqueue) takes for convolutions. */
SPARSERT_API int64_t sparsert_network_input_rows(const sparsert_network* net);
SPARSERT_API int64_t sparsert_network_output_rows(const sparsert_network* net);
SPARSERT_API int64_t sparsert_network_width(const sparsert_network* net);
/* 1 for a network of convolutions (NCHW images in and out), 0 for one of matrix layers (or NULL). */
SPARSERT_API int sparsert_network_is_convolutional(const sparsert_network* net);
/* "cuda" or "cpu": where the network runs. */
SPARSERT_API const char* sparsert_network_device(const sparsert_network* net);

/* Host memory: `input` holds input_rows x n floats, `output` receives output_rows x n. Matrix layers: 1 <= n <= 2^31
 * columns (more than the width run width at a time). Convolutions: n images, 1 to width. Returns when the output is
 * written. A NaN or infinite input is refused. */
SPARSERT_API sparsert_status sparsert_network_run(sparsert_network* net, const float* input, int64_t n,
                                                  float* output);

/* Device memory, a "cuda" network only. Matrix layers: the input is input_rows rows and the output output_rows rows
 * of width floats each (pitch width x 4 bytes, 16-byte aligned), their first n columns used (1 <= n <= width);
 * columns n and up of the output are not written. Convolutions: n NCHW images (1 <= n <= width) of input_rows floats
 * in and output_rows out, contiguous (4-byte aligned). input_bytes and output_bytes say what the buffers hold.
 * Enqueued on `stream`, a CUstream of the network's device (NULL: the legacy default stream), after its work so far;
 * returns without waiting. Inside a stream capture of the caller's, the layers are captured into its graph, which
 * then uses the network's buffers: it must not run beside another call of the network, nor after
 * sparsert_network_close. The C++ GpuNetwork::enqueue (sparsert/runtime/gpu_executor.hpp) says more. */
SPARSERT_API sparsert_status sparsert_network_enqueue(sparsert_network* net, uint64_t input, size_t input_bytes,
                                                      uint64_t output, size_t output_bytes, uint32_t n,
                                                      void* stream);

/* The same on batch-major buffers of a network of matrix layers: the input is n rows of input_rows floats and the
 * output n rows of output_rows floats (one row per sample, its features contiguous, as a framework keeps a linear
 * layer's input and output; 4-byte aligned), 1 <= n <= width. They are transposed on the device into and out of the
 * kernels' layout, in the same stream order; the first such call loads the transpose kernel, and may not be in a
 * capture. */
SPARSERT_API sparsert_status sparsert_network_enqueue_batch_major(sparsert_network* net, uint64_t input,
                                                                  size_t input_bytes, uint64_t output,
                                                                  size_t output_bytes, uint32_t n, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* SPARSERT_SPARSERT_H_ */
