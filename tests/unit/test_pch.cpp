// The translation unit of ipoibd_test_pch (tests/unit/CMakeLists.txt): the
// precompiled header of the test programs is built with it. Nothing else.
