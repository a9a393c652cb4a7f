/* SQuAD reader errors, slices, and SHA-256 (FIPS 180-2 test vectors, data-file digests
 * from ../shared/data/README.md). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../datasets/sha256.h"
#include "../datasets/squad_reader.h"
#include "test_squad_common.h"

TestSuite(squad_reader, .timeout = 60);

static void hex_of(const char *s, size_t n, char hex[65])
{
    uint8_t d[32];
    mpx_sha256(s, n, d);
    mpx_sha256_hex(d, 32, hex);
}

Test(squad_reader, sha256_vectors)
{
    char h[65];
    hex_of("", 0, h);
    cr_assert_str_eq(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hex_of("abc", 3, h);
    cr_assert_str_eq(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(m, strlen(m), h);
    cr_assert_str_eq(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    mpx_sha256_ctx s;
    mpx_sha256_init(&s);
    char a[1000];
    memset(a, 'a', sizeof a);
    for (int i = 0; i < 1000; i++) mpx_sha256_update(&s, a, sizeof a);
    uint8_t d[32];
    mpx_sha256_final(&s, d);
    mpx_sha256_hex(d, 32, h);
    cr_assert_str_eq(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    char err[256];
    cr_assert_eq(mpx_sha256_file(SQUAD_DEV, h, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(h, "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9");
    cr_assert_neq(mpx_sha256_file("build/tests/no-such-file", h, err, sizeof err), 0);
    cr_assert(strstr(err, "no-such-file"));
}

Test(squad_reader, dev_counts)
{
    char err[256];
    mpx_squad_dataset d;
    cr_assert_eq(mpx_squad_load(SQUAD_DEV, &d, err, sizeof err), 0, "%s (run `make data`)", err);
    cr_assert_eq(d.n_articles, 48);
    cr_assert_eq(d.n_paragraphs, 2067);
    cr_assert_eq(d.n_questions, 10570);
    cr_assert_str_eq(d.version, "1.1");
    cr_assert_eq(mpx_squad_find_question(&d, d.questions[77].id), 77);
    mpx_squad_free(&d);
}

static void expect_error(const char *content, const char *must1, const char *must2)
{
    const char *path = "build/tests/squad_reader_case.json";
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fputs(content, f);
    fclose(f);
    char err[512];
    mpx_squad_dataset d;
    cr_assert_neq(mpx_squad_load(path, &d, err, sizeof err), 0, "accepted: %s", content);
    cr_assert(strstr(err, path), "%s", err);
    cr_assert(strstr(err, must1), "'%s' lacks '%s'", err, must1);
    if (must2) cr_assert(strstr(err, must2), "'%s' lacks '%s'", err, must2);
}

#define QA(id, rest) "{\"data\": [{\"title\": \"t\", \"paragraphs\": [{\"context\": \"c\", \"qas\": [{\"id\": \"" id "\"" rest "}]}]}]}"

Test(squad_reader, errors_name_the_place)
{
    expect_error("{\"data\": [\n  {\"title\": 1,,}]}", ":2:", "invalid JSON");
    expect_error("{\"data\": [{\"title\": \"\xff\xfe\"}]}", ":1:", "invalid JSON");
    expect_error("", "empty file", "\"data\"");
    expect_error("[1, 2]", "expected a SQuAD", NULL);
    expect_error("{\"data\": []}", "no questions", NULL);
    expect_error("{\"data\": [{\"paragraphs\": [{\"qas\": []}]}]}", "article 0, paragraph 0", "context");
    expect_error("{\"data\": [{\"paragraphs\": [{\"context\": \"c\", \"qas\": [{\"question\": \"q\"}]}]}]}",
                 "article 0, paragraph 0, question 0", "\"id\"");
    expect_error(QA("q7", ", \"answers\": []"), "question q7", "\"question\"");
    expect_error(QA("q8", ", \"question\": \"q\""), "question q8", "\"answers\"");
    expect_error(QA("q9", ", \"question\": \"q\", \"answers\": [{\"text\": \"c\", \"answer_start\": \"0\"}]"),
                 "question q9", "answer_start");
    expect_error(QA("q10", ", \"question\": \"q\", \"answers\": [{\"answer_start\": 0}]"), "question q10", "text");
}

Test(squad_reader, slices)
{
    char err[256];
    mpx_squad_dataset d, s, s2;
    cr_assert_eq(mpx_squad_load(SQUAD_DEV, &d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(mpx_squad_slice_first(&d, 100, &s, err, sizeof err), 0, "%s", err);
    cr_assert_eq(s.n_questions, 100);
    for (int i = 0; i < 100; i++) {
        cr_assert_str_eq(s.questions[i].id, d.questions[i].id);
        cr_assert_str_eq(s.paragraphs[s.questions[i].paragraph].context,
                         d.paragraphs[d.questions[i].paragraph].context);
    }
    mpx_squad_free(&s);
    cr_assert_neq(mpx_squad_slice_first(&d, 10571, &s, err, sizeof err), 0);
    /* seeded sample: same seed, same questions, in file order; another seed differs */
    cr_assert_eq(mpx_squad_slice_sample(&d, 500, 42, &s, err, sizeof err), 0, "%s", err);
    cr_assert_eq(mpx_squad_slice_sample(&d, 500, 42, &s2, err, sizeof err), 0, "%s", err);
    for (int i = 0; i < 500; i++) cr_assert_str_eq(s.questions[i].id, s2.questions[i].id);
    mpx_squad_free(&s2);
    cr_assert_eq(mpx_squad_slice_sample(&d, 500, 43, &s2, err, sizeof err), 0, "%s", err);
    int same = 0;
    for (int i = 0; i < 500; i++) same += !strcmp(s.questions[i].id, s2.questions[i].id);
    cr_assert_lt(same, 50);
    mpx_squad_free(&s2);
    mpx_squad_free(&s);
    /* indices from an independent Python SplitMix64 Fisher-Yates (seed 7, 5 of 20) */
    int32_t idx[5];
    cr_assert_eq(mpx_squad_sample_indices(20, 5, 7, idx, err, sizeof err), 0);
    static const int32_t want[5] = {2, 3, 7, 14, 15};
    for (int i = 0; i < 5; i++) cr_assert_eq(idx[i], want[i], "idx[%d] = %d, want %d", i, idx[i], want[i]);
    mpx_squad_free(&d);
}
