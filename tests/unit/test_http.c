// HTTP front: a real server on a loopback port, driven by a raw socket
// client: routing to the handler, body limit (413), streamed replies, and the
// stream's done callback when the client goes away.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "server/http.h"

static atomic_int stream_done_calls;
static atomic_int stream_client_gone;

struct counter_stream {
    int left;
};

static ssize_t produce_lines(void *ctx, char *buf, size_t max)
{
    struct counter_stream *c = ctx;
    if (c->left == 0)
        return -1;
    c->left--;
    usleep(1000);
    return snprintf(buf, max, "data: %d\n\n", c->left);
}

static void stream_done(void *ctx, bool client_gone)
{
    (void)ctx;
    atomic_fetch_add(&stream_done_calls, 1);
    if (client_gone)
        atomic_fetch_add(&stream_client_gone, 1);
}

static struct counter_stream streams[4];
static atomic_int next_stream;

static void handler(void *user, struct http_exchange *x, const char *method, const char *path,
                    const char *body, size_t body_len)
{
    (void)user;
    if (!strcmp(path, "/echo")) {
        http_add_header(x, "X-Method", method);
        http_reply(x, 200, "text/plain", body, body_len);
    } else if (!strcmp(path, "/stream")) {
        struct counter_stream *s = &streams[atomic_fetch_add(&next_stream, 1) % 4];
        s->left = strstr(body, "long") ? 100000 : 3;
        http_reply_stream(x, 200, "text/event-stream", produce_lines, stream_done, s);
    } else {
        http_reply(x, 404, "text/plain", "nope", 4);
    }
}

// Sends raw request text and reads the whole reply (the server closes).
static size_t roundtrip(uint16_t port, const char *req, char *out, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return 0;
    }
    size_t len = strlen(req);
    for (size_t off = 0; off < len;) {
        ssize_t n = write(fd, req + off, len - off);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    size_t got = 0;
    for (ssize_t n; got + 1 < cap && (n = read(fd, out + got, cap - 1 - got)) > 0;)
        got += (size_t)n;
    out[got] = '\0';
    close(fd);
    return got;
}

static struct http_server *start(void)
{
    struct http_server_options o = {.host = "127.0.0.1", .port = 0, .max_body_bytes = 64,
                                    .handler = handler};
    struct http_server *s = NULL;
    char msg[256];
    CHECK_EQ_INT(http_server_start(&o, &s, msg, sizeof msg), VLLMC_OK);
    return s;
}

static void test_echo_and_404(void)
{
    struct http_server *s = start();
    char buf[4096];
    roundtrip(http_server_port(s),
              "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
              "hello",
              buf, sizeof buf);
    CHECK(strstr(buf, "HTTP/1.1 200") == buf);
    CHECK(strstr(buf, "X-Method: POST") != NULL);
    CHECK(strstr(buf, "\r\n\r\nhello") != NULL);
    roundtrip(http_server_port(s), "GET /missing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
              buf, sizeof buf);
    CHECK(strstr(buf, "HTTP/1.1 404") == buf);
    http_server_stop(s);
}

static void test_body_limit(void)
{
    struct http_server *s = start();
    char req[512], buf[4096];
    char body[101];
    memset(body, 'a', 100);
    body[100] = '\0';
    snprintf(req, sizeof req,
             "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nConnection: close\r\n\r\n%s",
             body);
    roundtrip(http_server_port(s), req, buf, sizeof buf);
    CHECK(strstr(buf, "HTTP/1.1 413") == buf);
    CHECK(strstr(buf, "exceeds the limit of 64 bytes") != NULL);
    // Chunked upload without a length: the limit is enforced while reading.
    snprintf(req, sizeof req,
             "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close"
             "\r\n\r\n64\r\n%s\r\n0\r\n\r\n",
             body);
    roundtrip(http_server_port(s), req, buf, sizeof buf);
    CHECK(strstr(buf, "HTTP/1.1 413") == buf);
    http_server_stop(s);
}

static void test_stream(void)
{
    struct http_server *s = start();
    char buf[8192];
    atomic_store(&stream_done_calls, 0);
    atomic_store(&stream_client_gone, 0);
    roundtrip(http_server_port(s),
              "POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
              "short",
              buf, sizeof buf);
    CHECK(strstr(buf, "HTTP/1.1 200") == buf);
    CHECK(strstr(buf, "data: 2\n\n") && strstr(buf, "data: 0\n\n"));
    usleep(100000);
    CHECK_EQ_INT(atomic_load(&stream_done_calls), 1);
    CHECK_EQ_INT(atomic_load(&stream_client_gone), 0);

    // A client that disconnects mid-stream: done() must report it.
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(http_server_port(s))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    const char *req = "POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nlong";
    CHECK(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
    CHECK(read(fd, buf, 100) > 0);
    close(fd);
    for (int i = 0; i < 200 && atomic_load(&stream_done_calls) < 2; i++)
        usleep(10000);
    CHECK_EQ_INT(atomic_load(&stream_done_calls), 2);
    CHECK_EQ_INT(atomic_load(&stream_client_gone), 1);
    http_server_stop(s);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"echo_and_404", test_echo_and_404},
        {"body_limit", test_body_limit},
        {"stream", test_stream},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
