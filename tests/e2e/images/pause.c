/* The sandbox process of every pod on the test node: holds the pod's namespaces, reaps
 * orphans, and exits on SIGINT or SIGTERM. Linked statically into an image of its own. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) { (void)sig; _exit(0); }

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, 0, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {0}, child = {0};
  stop.sa_handler = on_stop;
  sigaction(SIGINT, &stop, 0);
  sigaction(SIGTERM, &stop, 0);
  child.sa_handler = on_child;
  child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  sigaction(SIGCHLD, &child, 0);
  for (;;) pause();
}
