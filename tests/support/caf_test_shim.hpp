#pragma once
// CAF 0.17's deterministic test DSL (test_coordinator_fixture, expect/allow/inject, sched.run)
// driven from Catch2: the DSL's CAF_CHECK/CAF_REQUIRE/CAF_FAIL are rebound to Catch2 before
// caf/test/dsl.hpp is included (it has #pragma once, so the binding sticks). Link with
// tests/support/caf_catch_main.cpp. Failures inside expect() report at dsl.hpp; put context
// into INFO. Include this header only in test TUs (it defines lowercase macros).

#include <catch2/catch.hpp>

#include <caf/test/unit_test.hpp>

#undef CAF_CHECK
#undef CAF_CHECK_FUNC
#undef CAF_REQUIRE
#undef CAF_REQUIRE_FUNC
#undef CAF_FAIL
#undef CAF_ERROR
#undef CAF_MESSAGE
#define CAF_CHECK(...) CHECK(__VA_ARGS__)
#define CAF_CHECK_FUNC(func, x, y) CHECK(func{}(x, y))
#define CAF_REQUIRE(...) REQUIRE(__VA_ARGS__)
#define CAF_REQUIRE_FUNC(func, x, y) REQUIRE(func{}(x, y))
#define CAF_FAIL(msg) FAIL(msg)
#define CAF_ERROR(msg) FAIL(msg)
#define CAF_MESSAGE(msg) (void)0

#include <caf/test/dsl.hpp>
