// test_unit.h: what the two files of the test_unit program share: the check counters (defined in
// test_unit.c) and test_unit_reg.c's tests, which test_unit.c's main runs. Test code only.
#ifndef VT_TEST_UNIT_H
#define VT_TEST_UNIT_H

#define VT_CHECK_SHARED
#include "vt_check.h"

void test_drop_path_masks(void);
void test_dropout_masks(void);
void test_mix(void);
void test_erase(void);

#endif
