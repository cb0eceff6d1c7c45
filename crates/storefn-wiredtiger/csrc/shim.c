/*
 * A flat C face over WiredTiger's method tables (WT_CONNECTION, WT_SESSION, WT_CURSOR hold
 * function pointers), so Rust links libwiredtiger without mirroring those structs.
 * Items cross as stored bytes: an `S` item with its NUL, a `u` item as is.
 */
#include <stdint.h>
#include <string.h>
#include <wiredtiger.h>

int sfwt_open(const char *home, const char *config, WT_CONNECTION **conn) {
    return wiredtiger_open(home, NULL, config, conn);
}

int sfwt_close(WT_CONNECTION *conn) { return conn->close(conn, NULL); }

const char *sfwt_strerror(int code) { return wiredtiger_strerror(code); }

const char *sfwt_version(int *major, int *minor, int *patch) {
    return wiredtiger_version(major, minor, patch);
}

int sfwt_session(WT_CONNECTION *conn, WT_SESSION **session) {
    return conn->open_session(conn, NULL, NULL, session);
}

int sfwt_create(WT_SESSION *s, const char *uri, const char *config) {
    return s->create(s, uri, config);
}

int sfwt_checkpoint(WT_SESSION *s) { return s->checkpoint(s, NULL); }

int sfwt_cursor(WT_SESSION *s, const char *uri, WT_CURSOR **c) {
    return s->open_cursor(s, uri, NULL, NULL, c);
}

int sfwt_cursor_close(WT_CURSOR *c) { return c->close(c); }

static int is_raw(const char *fmt) { return strcmp(fmt, "u") == 0; }

static void set_key(WT_CURSOR *c, WT_ITEM *item, const uint8_t *key, size_t len) {
    if (is_raw(c->key_format)) {
        item->data = key;
        item->size = len;
        c->set_key(c, item);
    } else
        c->set_key(c, (const char *)key); /* stored form: NUL-terminated */
}

static int get_item(WT_CURSOR *c, int value, const uint8_t **data, size_t *len) {
    const char *fmt = value ? c->value_format : c->key_format;
    int ret;
    if (is_raw(fmt)) {
        WT_ITEM item;
        ret = value ? c->get_value(c, &item) : c->get_key(c, &item);
        *data = item.data;
        *len = item.size;
    } else {
        const char *s;
        ret = value ? c->get_value(c, &s) : c->get_key(c, &s);
        *data = (const uint8_t *)s;
        *len = ret == 0 ? strlen(s) + 1 : 0;
    }
    return ret;
}

/* 0: found, value set; WT_NOTFOUND: absent; else an error. */
int sfwt_search(WT_CURSOR *c, const uint8_t *key, size_t klen, const uint8_t **val, size_t *vlen) {
    WT_ITEM item;
    int ret;
    set_key(c, &item, key, klen);
    if ((ret = c->search(c)) != 0)
        return ret;
    return get_item(c, 1, val, vlen);
}

int sfwt_next(WT_CURSOR *c, const uint8_t **key, size_t *klen, const uint8_t **val, size_t *vlen) {
    int ret;
    if ((ret = c->next(c)) != 0)
        return ret;
    if ((ret = get_item(c, 0, key, klen)) != 0)
        return ret;
    return get_item(c, 1, val, vlen);
}

int sfwt_insert(WT_CURSOR *c, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen) {
    WT_ITEM k, v;
    set_key(c, &k, key, klen);
    if (is_raw(c->value_format)) {
        v.data = val;
        v.size = vlen;
        c->set_value(c, &v);
    } else
        c->set_value(c, (const char *)val);
    return c->insert(c);
}

int sfwt_remove(WT_CURSOR *c, const uint8_t *key, size_t klen) {
    WT_ITEM k;
    set_key(c, &k, key, klen);
    return c->remove(c);
}

int sfwt_notfound(void) { return WT_NOTFOUND; }

int sfwt_cursor_config(WT_SESSION *s, const char *uri, const char *config, WT_CURSOR **c) {
    return s->open_cursor(s, uri, NULL, config, c);
}

int sfwt_session_close(WT_SESSION *s) { return s->close(s, NULL); }

int sfwt_search_near(WT_CURSOR *c, const uint8_t *key, size_t klen, int *exact) {
    WT_ITEM item;
    set_key(c, &item, key, klen);
    return c->search_near(c, exact);
}

int sfwt_current(WT_CURSOR *c, const uint8_t **key, size_t *klen, const uint8_t **val,
                 size_t *vlen) {
    int ret;
    if ((ret = get_item(c, 0, key, klen)) != 0)
        return ret;
    return get_item(c, 1, val, vlen);
}

int sfwt_reset(WT_CURSOR *c) { return c->reset(c); }
