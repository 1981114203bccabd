/* SHA-256 against the FIPS 180-2 / NIST test vectors and padding-boundary lengths. */
#include "format_internal.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static void check_hash(const void *data, size_t len, const char *want)
{
    char got[65];
    memset(got, 'z', sizeof got);
    cz__sha256_hex(data, len, got);
    ck_assert_uint_eq(strlen(got), 64);
    ck_assert_str_eq(got, want);
}

START_TEST(test_empty)
{
    check_hash("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}
END_TEST

START_TEST(test_abc)
{
    check_hash("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
END_TEST

START_TEST(test_448_bits)
{
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    ck_assert_uint_eq(strlen(m), 56);
    check_hash(m, strlen(m), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}
END_TEST

START_TEST(test_896_bits)
{
    const char *m =
        "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
        "klmnopqrlmnopqrsmnopqrstnopqrstu";
    check_hash(m, strlen(m), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}
END_TEST

START_TEST(test_million_a)
{
    size_t n = 1000000;
    char *m = malloc(n);
    ck_assert_ptr_nonnull(m);
    memset(m, 'a', n);
    check_hash(m, n, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(m);
}
END_TEST

/* Lengths around the 55/56/64-byte padding boundaries (expected values from Python hashlib). */
START_TEST(test_padding_boundaries)
{
    static const struct {
        size_t n;
        const char *hex;
    } cases[] = {
        {55, "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072"},
        {56, "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e"},
        {63, "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2"},
        {64, "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c"},
        {119, "000b48d4edf0fa7bee3c6236ecd2785baa5db4eeb8bb54341b029e0d9fa5fb0c"},
        {120, "13f05a0b594787f5ecd315edc96141bd3243203d1b7d4f0836f37308b276ba98"},
    };
    char buf[128];
    memset(buf, 'x', sizeof buf);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_hash(buf, cases[i].n, cases[i].hex);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sha256");
    TCase *tc = tcase_create("vectors");
    tcase_add_test(tc, test_empty);
    tcase_add_test(tc, test_abc);
    tcase_add_test(tc, test_448_bits);
    tcase_add_test(tc, test_896_bits);
    tcase_add_test(tc, test_million_a);
    tcase_add_test(tc, test_padding_boundaries);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
