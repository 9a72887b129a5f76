/* The C interface from C (C11): the header compiles as C, the library links, and its answers where nothing can run:
 * a package that is not there, and "cuda" where SPARSERT_LIBCUDA names no library (the test sets it). */
#include <sparsert/sparsert.h>

#include <stdio.h>
#include <string.h>

static int failures = 0;

static void expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FAILED: %s (last error: %s)\n", what, sparsert_last_error());
    ++failures;
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: c_api_smoke MISSING_PACKAGE_DIR\n");
    return 2;
  }
  expect(strncmp(sparsert_version(), "sparsert ", 9) == 0, "sparsert_version");
  sparsert_network* net = NULL;
  expect(sparsert_network_open(argv[1], "cpu", 0, &net) == SPARSERT_BAD_INPUT, "a missing package is bad input");
  expect(net == NULL, "no network on failure");
  expect(strstr(sparsert_last_error(), "manifest.json") != NULL, "the message names the manifest");
  expect(strchr(sparsert_last_error(), '\n') == NULL, "the message is one line");
  expect(sparsert_network_open(argv[1], "cuda", 0, &net) == SPARSERT_NO_DEVICE, "no driver: SPARSERT_NO_DEVICE");
  expect(strstr(sparsert_last_error(), "no-such-libcuda.so") != NULL, "the message names the driver library");
  expect(sparsert_network_input_rows(NULL) == 0 && sparsert_network_width(NULL) == 0, "NULL networks have no shape");
  sparsert_network_close(NULL);
  if (failures == 0) printf("c_api_smoke: every check passed\n");
  return failures == 0 ? 0 : 1;
}
