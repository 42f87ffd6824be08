#include "abort_deadlines.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <system_error>
#include <thread>

namespace ds::comm {
namespace {

// Through syscall(): Debian 12's <sys/pidfd.h> declares the wrappers without C linkage.
int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int pidfd_send_signal(int pidfd, int sig) { return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0)); }

bool is_open_mpi_launcher(pid_t pid) {
  char comm[64] = {};
  const std::string path = "/proc/" + std::to_string(pid) + "/comm";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, comm, sizeof comm - 1);
  ::close(fd);
  if (n <= 0) return false;
  comm[n - 1] = comm[n - 1] == '\n' ? '\0' : comm[n - 1];
  for (const char* name : {"mpirun", "mpiexec", "orterun", "prterun"})
    if (std::strcmp(comm, name) == 0) return true;
  return false;
}

void sleep_seconds(long seconds) {
  timespec left{seconds, 0};
  while (::nanosleep(&left, &left) != 0) {
  }
}

// The detached process's whole life; async-signal-safe calls only (the rank has other threads).
[[noreturn]] void end_launcher_after(int launcher, long grace_seconds) {
  ::setsid();
  // Holding the rank's stdout, stderr or sockets open would keep mpirun waiting for their end.
  if (launcher > 0) ::close_range(0, static_cast<unsigned>(launcher) - 1, 0);
  ::close_range(static_cast<unsigned>(launcher) + 1, ~0u, 0);
  sleep_seconds(grace_seconds);
  for (int sig : {SIGTERM, SIGTERM}) {
    if (pidfd_send_signal(launcher, sig) != 0) ::_exit(0);
    sleep_seconds(1);
  }
  sleep_seconds(5);
  pidfd_send_signal(launcher, SIGKILL);
  ::_exit(0);
}

}  // namespace

void start_launcher_deadline(std::chrono::seconds grace) {
  const pid_t parent = ::getppid();
  if (!is_open_mpi_launcher(parent)) return;
  const int launcher = pidfd_open(parent);
  if (launcher < 0) return;
  // The parent may have ended between the two calls and its pid gone to another process.
  if (::getppid() != parent) {
    ::close(launcher);
    return;
  }
  const pid_t child = ::fork();
  if (child == 0) end_launcher_after(launcher, static_cast<long>(grace.count()));
  ::close(launcher);
}

void start_exit_deadline(std::chrono::seconds grace) {
  // On the way out already: without a thread to spare, MPI_Abort alone has to do.
  try {
    std::thread([grace] {
      std::this_thread::sleep_for(grace);
      ::_exit(1);
    }).detach();
  } catch (const std::system_error&) {
  }
}

}  // namespace ds::comm
