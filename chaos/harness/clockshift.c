/* clockshift: moves a process's wall clock by an offset read from a file,
 * for the fault harness's clock-skew scenarios (LD_PRELOAD).
 *
 *   CHAOS_CLOCK_OFFSET_FILE=/path/offset LD_PRELOAD=clockshift.so redis-server ...
 *
 * The file holds a signed number of milliseconds (-8000: eight seconds
 * behind). It is read again at most every 100 ms of wall time, so the
 * offset can be changed while the process runs (a clock that jumps).
 * Only the wall clock moves (gettimeofday, time, clock_gettime of
 * CLOCK_REALTIME and its coarse form): the monotonic clocks, which measure
 * durations, are left alone, as NTP leaves them.
 *
 * Why not libfaketime: 0.9.10 (Debian's) recurses at start-up in a
 * redis-server linked with jemalloc (jemalloc reads the clock while
 * libfaketime's initialisation allocates) and the server hangs. This shim
 * reads the real clock with the raw system call and allocates nothing, so
 * it cannot recurse.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ns;
static long long next_read_ns = -1;

static long long real_ns(clockid_t clock) {
  struct timespec ts;
  syscall(SYS_clock_gettime, clock, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The offset, read from the file when 100 ms have passed since the last
 * read. Races between threads only read the file twice. */
static long long current_offset(long long now_ns) {
  if (now_ns >= next_read_ns) {
    const char *path = getenv("CHAOS_CLOCK_OFFSET_FILE");
    next_read_ns = now_ns + 100000000LL;
    if (path != NULL) {
      char text[32];
      int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        long n = (long)syscall(SYS_read, fd, text, sizeof text - 1);
        syscall(SYS_close, fd);
        if (n > 0) {
          text[n] = 0;
          offset_ns = strtoll(text, NULL, 10) * 1000000LL;
        }
      }
    }
  }
  return offset_ns;
}

static int shifted(clockid_t clock) {
  return clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
  if (!shifted(clock)) {
    return (int)syscall(SYS_clock_gettime, clock, ts);  /* errors as they are */
  }
  long long ns = real_ns(clock);
  ns += current_offset(ns);
  ts->tv_sec = ns / 1000000000LL;
  ts->tv_nsec = ns % 1000000000LL;
  return 0;
}

int gettimeofday(struct timeval *tv, void *tz) {
  (void)tz;
  long long ns = real_ns(CLOCK_REALTIME);
  ns += current_offset(ns);
  tv->tv_sec = ns / 1000000000LL;
  tv->tv_usec = (ns % 1000000000LL) / 1000;
  return 0;
}

time_t time(time_t *out) {
  long long ns = real_ns(CLOCK_REALTIME);
  time_t seconds = (time_t)((ns + current_offset(ns)) / 1000000000LL);
  if (out != NULL) {
    *out = seconds;
  }
  return seconds;
}
