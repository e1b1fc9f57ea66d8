/* A stand-in for the one `cp` call OLM makes: its bundle unpack Job's "util" init container runs
   `/bin/cp -Rv /bin/cpb /util/cpb` in the OLM image (the catalog operator's --util-image), which
   here has no coreutils. Copies one regular file, keeping its permission bits; flags are accepted
   and ignored except -v (prints what it copied, as GNU cp does). Built statically like pause.c. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
  const char *src = NULL, *dst = NULL;
  int verbose = 0;
  for (int i = 1; i < argc; i++) {
    if (argv[i][0] == '-') {
      for (const char *f = argv[i] + 1; *f; f++) verbose |= *f == 'v';
    } else if (!src) {
      src = argv[i];
    } else if (!dst) {
      dst = argv[i];
    } else {
      fprintf(stderr, "cp: only SRC DST is supported\n");
      return 2;
    }
  }
  if (!src || !dst) { fprintf(stderr, "usage: cp [-Rv] SRC DST\n"); return 2; }
  struct stat st;
  int in = open(src, O_RDONLY);
  if (in < 0 || fstat(in, &st) < 0 || !S_ISREG(st.st_mode)) { perror(src); return 1; }
  int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, st.st_mode & 07777);
  if (out < 0) { perror(dst); return 1; }
  char buf[65536];
  ssize_t n;
  while ((n = read(in, buf, sizeof buf)) > 0) {
    for (ssize_t w = 0; w < n;) {
      ssize_t k = write(out, buf + w, n - w);
      if (k < 0) { perror(dst); return 1; }
      w += k;
    }
  }
  if (n < 0 || fchmod(out, st.st_mode & 07777) < 0 || close(out) < 0) { perror(dst); return 1; }
  if (verbose) printf("'%s' -> '%s'\n", src, dst);
  return 0;
}
