/* A plugin library built against a future ABI major (99): the host must refuse it
 * with an error naming the file and both versions, and keep running. */
#include <stddef.h>
#include <stdint.h>

struct table_head { uint32_t abi_major; uint32_t abi_minor; size_t size; };
static const struct table_head TABLE = { 99, 0, sizeof(struct table_head) };

const void *rocewatch_plugin_entry(void) { return &TABLE; }
