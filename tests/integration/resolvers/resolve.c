/* A musl client for tests/integration/resolvers.rs: one lookup through
 * libc, as a program in an Alpine image makes it, timed.
 *
 *   resolve addrs|addrs4 NAME   getaddrinfo (AF_UNSPEC or AF_INET)
 *   resolve ptr IP              getnameinfo with NI_NAMEREQD
 *   resolve srv NAME            res_query for SRV (musl applies no search
 *                               list to res_query: NAME is absolute)
 *
 * Prints one line: "ok MS ITEM..." (items sorted and unique: addresses,
 * names without the trailing dot, PORT:TARGET), or "fail MS WHY".
 * Built with musl-gcc -static. */
#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <netdb.h>
#include <netinet/in.h>
#include <resolv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define MAX_ITEMS 1024

static char *items[MAX_ITEMS];
static int n_items;

static void add(const char *s) {
    for (int i = 0; i < n_items; i++)
        if (strcmp(items[i], s) == 0) return;
    if (n_items < MAX_ITEMS) items[n_items++] = strdup(s);
}

static int cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s addrs|addrs4|ptr|srv NAME\n", argv[0]);
        return 64;
    }
    const char *op = argv[1], *name = argv[2];
    char why[256] = "";
    double start = now_ms();
    if (!strcmp(op, "addrs") || !strcmp(op, "addrs4")) {
        struct addrinfo hints = {0}, *res, *p;
        hints.ai_family = strcmp(op, "addrs4") ? AF_UNSPEC : AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        int rc = getaddrinfo(name, NULL, &hints, &res);
        if (rc) {
            snprintf(why, sizeof why, "%s", gai_strerror(rc));
        } else {
            for (p = res; p; p = p->ai_next) {
                char buf[INET6_ADDRSTRLEN];
                const void *a = p->ai_family == AF_INET
                    ? (const void *)&((struct sockaddr_in *)p->ai_addr)->sin_addr
                    : (const void *)&((struct sockaddr_in6 *)p->ai_addr)->sin6_addr;
                inet_ntop(p->ai_family, a, buf, sizeof buf);
                add(buf);
            }
            freeaddrinfo(res);
        }
    } else if (!strcmp(op, "ptr")) {
        struct sockaddr_storage ss = {0};
        socklen_t len;
        if (inet_pton(AF_INET, name, &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
            ss.ss_family = AF_INET;
            len = sizeof(struct sockaddr_in);
        } else if (inet_pton(AF_INET6, name, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
            ss.ss_family = AF_INET6;
            len = sizeof(struct sockaddr_in6);
        } else {
            fprintf(stderr, "not an address: %s\n", name);
            return 64;
        }
        char host[NI_MAXHOST];
        int rc = getnameinfo((struct sockaddr *)&ss, len, host, sizeof host, NULL, 0, NI_NAMEREQD);
        if (rc) snprintf(why, sizeof why, "%s", gai_strerror(rc));
        else add(host);
    } else if (!strcmp(op, "srv")) {
        unsigned char ans[65536];
        int len = res_query(name, ns_c_in, ns_t_srv, ans, sizeof ans);
        ns_msg msg;
        if (len < 0) {
            snprintf(why, sizeof why, "res_query failed");
        } else if (ns_initparse(ans, len, &msg) < 0) {
            snprintf(why, sizeof why, "unparsable answer");
        } else {
            for (int i = 0; i < ns_msg_count(msg, ns_s_an); i++) {
                ns_rr rr;
                char target[NS_MAXDNAME], item[NS_MAXDNAME + 8];
                if (ns_parserr(&msg, ns_s_an, i, &rr) || ns_rr_type(rr) != ns_t_srv) continue;
                const unsigned char *rd = ns_rr_rdata(rr);
                if (ns_name_uncompress(ns_msg_base(msg), ns_msg_end(msg), rd + 6, target, sizeof target) < 0)
                    continue;
                snprintf(item, sizeof item, "%u:%s", (rd[4] << 8) | rd[5], target);
                add(item);
            }
        }
    } else {
        fprintf(stderr, "unknown op %s\n", op);
        return 64;
    }
    double ms = now_ms() - start;
    if (why[0] || n_items == 0) {
        printf("fail %.0f %s\n", ms, why[0] ? why : "no records");
        return 0;
    }
    qsort(items, n_items, sizeof *items, cmp);
    printf("ok %.0f", ms);
    for (int i = 0; i < n_items; i++) {
        size_t l = strlen(items[i]);
        if (l > 1 && items[i][l - 1] == '.') items[i][l - 1] = 0;
        printf(" %s", items[i]);
    }
    printf("\n");
    return 0;
}
