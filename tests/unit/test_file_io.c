/* The shared reader and writer (file_io.c) at the library level: size caps on regular files and
 * pipes, devices refused as input, and the output policy (atomic for regular files, in place for
 * FIFOs, symbolic links followed, read-only files refused, same-file outputs refused). Everything
 * is written inside one mkdtemp folder. */
#include "cz_format.h"

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/cz_file_io.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static const char *in_dir(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

static char *get(const char *path)
{
    char *buf = NULL;
    size_t len = 0;
    cz_error err;
    ck_assert_int_eq(cz__file_read_all(path, 1 << 20, &buf, &len, &err), CZ_OK);
    ck_assert_uint_eq(strlen(buf), len);
    return buf;
}

START_TEST(regular_file_over_cap_refused_before_reading)
{
    char p[128];
    in_dir(p, sizeof p, "big.json");
    put(p, "0123456789abcdef");
    char *buf = (char *)1;
    size_t len = 7;
    cz_error err;
    ck_assert_int_eq(cz__file_read_all(p, 10, &buf, &len, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "is 16 bytes; files larger than 10 bytes are refused"), "%s",
                  err.message);
    ck_assert_ptr_null(buf);
    ck_assert_uint_eq(len, 0);
    /* At the cap exactly it is read, NUL-terminated. */
    ck_assert_int_eq(cz__file_read_all(p, 16, &buf, &len, &err), CZ_OK);
    ck_assert_uint_eq(len, 16);
    ck_assert_str_eq(buf, "0123456789abcdef");
    free(buf);
}
END_TEST

/* A pipe has no size: the cap stops the reading itself. */
START_TEST(pipe_read_up_to_cap)
{
    char path[64], text[101];
    memset(text, 'x', 100);
    text[100] = '\0';
    for (int round = 0; round < 2; round++) {
        int fds[2];
        ck_assert_int_eq(pipe(fds), 0);
        ck_assert_int_eq(write(fds[1], text, 100), 100);
        close(fds[1]);
        snprintf(path, sizeof path, "/dev/fd/%d", fds[0]);
        char *buf = NULL;
        size_t len = 0;
        cz_error err;
        if (round == 0) {
            ck_assert_int_eq(cz__file_read_all(path, 10, &buf, &len, &err), CZ_EINVALID);
            ck_assert_msg(strstr(err.message, "more than 10 bytes"), "%s", err.message);
            ck_assert_ptr_null(buf);
        } else {
            ck_assert_int_eq(cz__file_read_all(path, 100, &buf, &len, &err), CZ_OK);
            ck_assert_uint_eq(len, 100);
            ck_assert_str_eq(buf, text);
            free(buf);
        }
        close(fds[0]);
    }
}
END_TEST

START_TEST(devices_and_folders_refused_as_input)
{
    char *buf = NULL;
    size_t len = 0;
    cz_error err;
    ck_assert_int_eq(cz__file_read_all("/dev/zero", 1 << 30, &buf, &len, &err), CZ_EIO);
    ck_assert_msg(strstr(err.message, "/dev/zero: is a character device, not a regular file"), "%s",
                  err.message);
    ck_assert_int_eq(cz__file_read_all(dir, 1 << 30, &buf, &len, &err), CZ_EIO);
    ck_assert_msg(strstr(err.message, "is a folder"), "%s", err.message);
    ck_assert_ptr_null(buf);
}
END_TEST

START_TEST(regular_file_replaced_whole_mode_kept)
{
    char p[128];
    in_dir(p, sizeof p, "out.json");
    put(p, "old content that is longer than the new one");
    ck_assert_int_eq(chmod(p, 0640), 0);
    struct stat before, after;
    ck_assert_int_eq(stat(p, &before), 0);
    cz_error err;
    ck_assert_int_eq(cz__file_write(p, "new", 3, &err), CZ_OK);
    ck_assert_int_eq(stat(p, &after), 0);
    char *text = get(p);
    ck_assert_str_eq(text, "new");
    free(text);
    ck_assert_int_eq(after.st_mode & 07777, 0640);
    /* Replaced by rename: a new inode, never a partly rewritten old one. */
    ck_assert(before.st_ino != after.st_ino);
}
END_TEST

START_TEST(symlink_followed_into_another_folder)
{
    char sub[128], target[160], link[128];
    in_dir(sub, sizeof sub, "sub");
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    snprintf(target, sizeof target, "%s/target.json", sub);
    put(target, "old");
    in_dir(link, sizeof link, "link.json");
    ck_assert_int_eq(symlink("sub/target.json", link), 0);
    cz_error err;
    ck_assert_int_eq(cz__file_write(link, "new", 3, &err), CZ_OK);
    struct stat st;
    ck_assert_int_eq(lstat(link, &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    char *text = get(target);
    ck_assert_str_eq(text, "new");
    free(text);
    /* A loop is reported, not followed forever. */
    char a[128], b[128];
    in_dir(a, sizeof a, "a");
    in_dir(b, sizeof b, "b");
    ck_assert_int_eq(symlink("b", a), 0);
    ck_assert_int_eq(symlink("a", b), 0);
    ck_assert_int_eq(cz__file_write(a, "x", 1, &err), CZ_EIO);
    ck_assert_msg(strstr(err.message, "too many levels of symbolic links"), "%s", err.message);
}
END_TEST

START_TEST(fifo_written_in_place)
{
    char p[128];
    in_dir(p, sizeof p, "fifo");
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t child = fork();
    ck_assert_int_ne(child, -1);
    if (child == 0) {
        /* The reader: copies what arrives through the FIFO into the pipe. */
        char buf[64];
        int fd = open(p, O_RDONLY);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf) : -1;
        _exit(n > 0 && write(fds[1], buf, (size_t)n) == n ? 0 : 1);
    }
    close(fds[1]);
    cz_error err;
    ck_assert_int_eq(cz__file_write(p, "through", 7, &err), CZ_OK);
    int status = 0;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char got[16] = "";
    ck_assert_int_eq(read(fds[0], got, sizeof got - 1), 7);
    close(fds[0]);
    ck_assert_str_eq(got, "through");
    struct stat st;
    ck_assert_int_eq(lstat(p, &st), 0);
    ck_assert(S_ISFIFO(st.st_mode));
}
END_TEST

START_TEST(read_only_and_folder_refused)
{
    char p[128];
    in_dir(p, sizeof p, "ro.json");
    put(p, "keep");
    ck_assert_int_eq(chmod(p, 0444), 0);
    cz_error err;
    ck_assert_int_eq(cz__file_write(p, "new", 3, &err), CZ_EIO);
    ck_assert_msg(strstr(err.message, "is read-only"), "%s", err.message);
    char *text = get(p);
    ck_assert_str_eq(text, "keep");
    free(text);
    ck_assert_int_eq(cz__file_write(dir, "new", 3, &err), CZ_EIO);
    ck_assert_msg(strstr(err.message, "is a folder"), "%s", err.message);
    /* Only ro.json is there: no temporary file was left behind. */
    char cmd[160];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(same_file_as_an_input_refused)
{
    char in[128], hard[128], soft[128], other[128], fresh[128];
    in_dir(in, sizeof in, "model.json");
    in_dir(hard, sizeof hard, "hard.json");
    in_dir(soft, sizeof soft, "soft.json");
    in_dir(other, sizeof other, "other.json");
    in_dir(fresh, sizeof fresh, "fresh.json");
    put(in, "{}");
    put(other, "{}");
    ck_assert_int_eq(link(in, hard), 0);
    ck_assert_int_eq(symlink("model.json", soft), 0);
    const char *inputs[] = {NULL, in}, *what[] = {"the cluster", "the model"};
    cz_error err;
    ck_assert_int_eq(cz__file_check_output(hard, inputs, what, 2, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "the same file as the model"), "%s", err.message);
    ck_assert_int_eq(cz__file_check_output(soft, inputs, what, 2, &err), CZ_EINVALID);
    ck_assert_int_eq(cz__file_check_output(other, inputs, what, 2, &err), CZ_OK);
    ck_assert_int_eq(cz__file_check_output(fresh, inputs, what, 2, &err), CZ_OK);
    ck_assert_int_eq(cz__file_check_output("-", inputs, what, 2, &err), CZ_OK);
    ck_assert_int_eq(cz__file_check_output(NULL, inputs, what, 2, &err), CZ_OK);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("file_io");
    TCase *tc = tcase_create("io");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, regular_file_over_cap_refused_before_reading);
    tcase_add_test(tc, pipe_read_up_to_cap);
    tcase_add_test(tc, devices_and_folders_refused_as_input);
    tcase_add_test(tc, regular_file_replaced_whole_mode_kept);
    tcase_add_test(tc, symlink_followed_into_another_folder);
    tcase_add_test(tc, fifo_written_in_place);
    tcase_add_test(tc, read_only_and_folder_refused);
    tcase_add_test(tc, same_file_as_an_input_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
