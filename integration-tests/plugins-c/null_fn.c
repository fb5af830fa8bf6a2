/* A plugin whose function table has the right ABI header and size but a NULL `call`
 * pointer: the host must refuse it at load, naming the file and the field, instead of
 * crashing when it first calls the plugin. The layout follows PluginTableV1
 * (core/plugin-sdk/src/abi.rs). */
#include <stddef.h>
#include <stdint.h>

struct table {
    uint32_t abi_major;
    uint32_t abi_minor;
    size_t size;
    const char *name_ptr;
    size_t name_len;
    const char *version_ptr;
    size_t version_len;
    uint32_t kinds;
    void *create;
    void *call;
    void *free_buf;
    void *destroy;
};

static int create(void **h, void *out) { (void)out; *h = 0; return 0; }
static void free_buf(void *buf) { (void)buf; }
static void destroy(void *h) { (void)h; }

static const struct table TABLE = {
    1, 1, sizeof(struct table), "null_fn", 7, "0.0.0", 5,
    1u << 3, /* collector */
    (void *)create, NULL, (void *)free_buf, (void *)destroy,
};

const void *rocewatch_plugin_entry(void) { return &TABLE; }
