/* Loaded into the arm64 podns under qemu-user only (tests/image/qemu.sh),
 * never into the image. qemu-user 7.2 (Debian 12's) does not emulate
 * setsockopt(SOL_SOCKET, SO_RXQ_OVFL) and answers ENOPROTOOPT, which podns
 * treats as a failed UDP bind, as it should on a real kernel. Here that one
 * refusal becomes a success that does nothing (the drop count is then
 * absent); every other call is libc's, unchanged. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/socket.h>

int setsockopt(int fd, int level, int name, const void *value, socklen_t len) {
    static int (*real)(int, int, int, const void *, socklen_t);
    if (!real)
        real = (int (*)(int, int, int, const void *, socklen_t))dlsym(RTLD_NEXT, "setsockopt");
    int r = real(fd, level, name, value, len);
    if (r != 0 && errno == ENOPROTOOPT && level == SOL_SOCKET && name == SO_RXQ_OVFL)
        return 0;
    return r;
}
