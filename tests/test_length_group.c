/* Length-grouped batch order against transformers' get_length_grouped_indices
 * (tests/fixtures/length_group/length_group.json, made by make_fixture.py there, from
 * the same shuffled order), and one case worked by hand. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>

#include "../core/tasks/length_group.h"

#define FIXTURE "tests/fixtures/length_group/length_group.json"

static int32_t *ints(json_t *a, size_t n)
{
    cr_assert(json_is_array(a) && json_array_size(a) == n, "fixture array of %zu expected", n);
    int32_t *v = malloc((n ? n : 1) * sizeof *v);
    cr_assert(v);
    for (size_t i = 0; i < n; i++) v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

Test(length_group, matches_transformers)
{
    json_error_t err;
    json_t *root = json_load_file(FIXTURE, 0, &err);
    cr_assert(root, "%s:%d:%d: %s", FIXTURE, err.line, err.column, err.text);
    json_t *cases = json_object_get(root, "cases");
    cr_assert(json_array_size(cases) >= 5);
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *k = json_array_get(cases, c);
        size_t n = (size_t)json_integer_value(json_object_get(k, "n"));
        int32_t batch = (int32_t)json_integer_value(json_object_get(k, "batch"));
        int32_t *len = ints(json_object_get(k, "lengths"), n), *order = ints(json_object_get(k, "perm"), n),
                *want = ints(json_object_get(k, "expected"), n);
        cr_assert_eq(mpx_group_by_length(order, (int32_t)n, len, batch), 0);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(order[i], want[i], "case %zu (n %zu, batch %d): position %zu is window %d, transformers %d",
                         c, n, batch, i, order[i], want[i]);
        free(len);
        free(order);
        free(want);
    }
    json_decref(root);
}

/* n = 6, batch 1: mult = min(6 / 4, 50) = 1, so every megabatch is one window and only
 * the swap acts: the first longest window (5, at position 1) trades places with the first. */
Test(length_group, by_hand_singletons)
{
    int32_t len[6] = { 3, 5, 5, 2, 1, 4 }, order[6] = { 0, 1, 2, 3, 4, 5 }, want[6] = { 1, 0, 2, 3, 4, 5 };
    cr_assert_eq(mpx_group_by_length(order, 6, len, 1), 0);
    for (int i = 0; i < 6; i++) cr_assert_eq(order[i], want[i], "position %d", i);
}

/* n = 8, batch 2: mult = min(8 / 8, 50) = 1, megabatches of 2 from the order 7..0:
 * (7,6) (5,4) (3,2) (1,0) with lengths (10,20) (30,30) (5,40) (9,9), sorted longest first:
 * (6,7) (5,4) (2,3) (1,0) — 5 and 4 tie and keep their order; the longest (40, window 2)
 * heads the third megabatch and swaps with window 6. */
Test(length_group, by_hand_pairs)
{
    int32_t len[8] = { 9, 9, 40, 5, 30, 30, 20, 10 }, order[8] = { 7, 6, 5, 4, 3, 2, 1, 0 };
    int32_t want[8] = { 2, 7, 5, 4, 6, 3, 1, 0 };
    cr_assert_eq(mpx_group_by_length(order, 8, len, 2), 0);
    for (int i = 0; i < 8; i++) cr_assert_eq(order[i], want[i], "position %d", i);
}
