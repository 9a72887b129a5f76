#include "sparsert/codegen/ptx_builder.hpp"
#include "sparsert/runtime/error.hpp"

#include <gtest/gtest.h>

#include <algorithm>

using namespace sparsert::codegen::ptx;

TEST(PtxBuilder, OperandsSpellExactly) {
  EXPECT_EQ(to_string(Reg{RegClass::kF32, 12}), "%f12");
  EXPECT_EQ(to_string(Reg{RegClass::kB64, 3}), "%rd3");
  EXPECT_EQ(to_string(Reg{RegClass::kPred, 1}), "%p1");
  EXPECT_EQ(to_string(F32Imm{0.1f}), "0f3DCCCCCD");
  EXPECT_EQ(to_string(F32Imm{-2.0f}), "0fC0000000");
  EXPECT_EQ(to_string(F32Imm{0.0f}), "0f00000000");
  EXPECT_EQ(to_string(F32Imm{-0.0f}), "0f80000000");
  EXPECT_EQ(to_string(IntImm{-7}), "-7");
  EXPECT_EQ(to_string(Address{Reg{RegClass::kB64, 4}, 16}), "[%rd4+16]");
  EXPECT_EQ(to_string(Address{Reg{RegClass::kB64, 4}, 0}), "[%rd4]");
  EXPECT_EQ(to_string(Address{Reg{RegClass::kB64, 4}, -8}), "[%rd4-8]");
  EXPECT_EQ(to_string(SymbolAddress{"weights", 12}), "[weights+12]");
  EXPECT_EQ(to_string(Special{"%ctaid.y"}), "%ctaid.y");
  const Reg v[] = {{RegClass::kF32, 1}, {RegClass::kF32, 2}};
  EXPECT_EQ(to_string(Vector{v}), "{%f1, %f2}");
}

TEST(PtxBuilder, InstructionsAndDeclarations) {
  Builder b;
  const Reg acc = b.reg(RegClass::kF32), x = b.reg(RegClass::kF32), p = b.reg(RegClass::kPred);
  const Reg ptr = b.reg(RegClass::kB64);
  b.comment("k 3");
  b.fma_imm(acc, x, 0.1f, true);
  b.fma_imm(acc, x, 0.1f, false);
  b.fma_reg(acc, x, x, false);
  b.inst("ld.global.nc.f32", {x, Address{ptr, 1024}});
  b.inst("st.global.f32", {Address{ptr, 0}, acc}, Guard{p});
  b.inst("bra", {Symbol{"$done"}}, Guard{p, true});
  b.label("$done");
  b.inst("ret", {});
  EXPECT_EQ(b.body(),
            "\t// k 3\n"
            "\tmul.rn.f32 %f1, %f2, 0f3DCCCCCD;\n"
            "\tfma.rn.f32 %f1, %f2, 0f3DCCCCCD, %f1;\n"
            "\tfma.rn.f32 %f1, %f2, %f2, %f1;\n"
            "\tld.global.nc.f32 %f2, [%rd1+1024];\n"
            "\t@%p1 st.global.f32 [%rd1], %f1;\n"
            "\t@!%p1 bra $done;\n"
            "$done:\n"
            "\tret;\n");
  EXPECT_EQ(b.declarations(), "\t.reg .pred %p<2>;\n\t.reg .b64 %rd<2>;\n\t.reg .f32 %f<3>;\n");
  EXPECT_EQ(b.instructions(), 7);
}

// Registers the builder did not allocate, register ids of every width, and a line longer than the staging buffer
// take the slow paths; the text must not change.
TEST(PtxBuilder, UnlistedRegistersAndLongLines) {
  Builder b;
  const Reg mine = b.reg(RegClass::kB32);
  const Reg foreign{RegClass::kF32, 4000000000u};
  const Reg zero{RegClass::kB64, 0};
  b.inst("mov.b32", {mine, IntImm{-9223372036854775807LL}});
  b.fma_imm(foreign, foreign, 1.0f, false);
  b.inst("ld.global.f32", {foreign, Address{zero, -4}});
  const std::string label(6000, 'L');
  b.inst("bra", {Symbol{label}});
  b.inst("ld.const.f32", {foreign, SymbolAddress{label, 8}});
  EXPECT_EQ(b.body(), "\tmov.b32 %r1, -9223372036854775807;\n"
                      "\tfma.rn.f32 %f4000000000, %f4000000000, 0f3F800000, %f4000000000;\n"
                      "\tld.global.f32 %f4000000000, [%rd0-4];\n"
                      "\tbra " + label + ";\n"
                      "\tld.const.f32 %f4000000000, [" + label + "+8];\n");
  EXPECT_EQ(b.instructions(), 5);
}

TEST(PtxBuilder, EntrySignatureSpellsExactly) {
  const std::vector<EntryParam> params = {{"k_param_B", "u64"}, {"k_param_N", "u32"}};
  EXPECT_EQ(entry_signature("k", params, {64, 2, 1, true}),
            ".visible .entry k(\n\t.param .u64 k_param_B,\n\t.param .u32 k_param_N\n)\n.reqntid 64, 2, 1\n{\n");
  EXPECT_EQ(entry_signature("f", std::vector<EntryParam>{{"f_C", "u64"}}, {128, 1, 1, false}),
            ".visible .entry f(\n\t.param .u64 f_C\n)\n.maxntid 128, 1, 1\n{\n");
  EXPECT_EQ(entry_signature("e", {}, {}), ".visible .entry e(\n)\n.reqntid 1, 1, 1\n{\n");
  EXPECT_EQ(entry_signature("r", {}, {32, 2, 1, true, 64}), ".visible .entry r(\n)\n.reqntid 32, 2, 1\n.maxnreg 64\n{\n");
  // A name ptxas would not parse is a bug of the caller, caught here rather than as a JIT error.
  for (const char* bad : {"a-b", "1k", "", "_", "a b", "a.b"}) {
    EXPECT_THROW(entry_signature(bad, {}, {}), sparsert::InternalError) << bad;
  }
  EXPECT_NO_THROW(entry_signature("_k$1", {}, {}));
}

TEST(PtxBuilder, AnyTextBecomesAnIdentifier) {
  EXPECT_EQ(ptx_identifier("conv1-1/a.b"), "conv1_1_a_b");
  EXPECT_EQ(ptx_identifier("1x1"), "_1x1");
  EXPECT_EQ(ptx_identifier(""), "__");
  EXPECT_EQ(ptx_identifier("-"), "__");
  EXPECT_EQ(ptx_identifier("fc_2"), "fc_2");
  EXPECT_EQ(ptx_identifier("a$b \xc3\xa9"), "a_b___");
  for (const char* text : {"conv1-1/a.b", "1x1", "", "-", "\xc3\xa9t\xc3\xa9"}) {
    EXPECT_NO_THROW(entry_signature(ptx_identifier(text), {}, {})) << text;
  }
}

// The registers a block function needs from the preamble: every register PTX text names, each once in order, or only
// those of a given set; names that merely contain one (%rd10x, a%r1, %pred) are not registers.
TEST(PtxBuilder, RegistersNamedInText) {
  const std::string text =
      "\tfma.rn.f32 %f3, %f12, 0f3F800000, %f3;\n\tld.global.nc.f32 %f12, [%rd9+4];\n\t@%p2 bra $x;\n"
      "\tmov.b32 %r4, %r10; // %rd10x a%r1 %pred %f\n\tst.global.f32 [%rd9], %f3;\n";

  const std::vector<Reg> all = registers_in(text);
  const std::vector<Reg> expected = {{RegClass::kPred, 2}, {RegClass::kB32, 4}, {RegClass::kB32, 10},
                                     {RegClass::kB64, 9}, {RegClass::kF32, 3}, {RegClass::kF32, 12}};
  std::vector<Reg> sorted_expected = expected;
  std::sort(sorted_expected.begin(), sorted_expected.end());
  EXPECT_EQ(all, sorted_expected);
  const std::vector<Reg> among = {{RegClass::kPred, 1}, {RegClass::kPred, 2}, {RegClass::kB64, 8}, {RegClass::kB64, 9}};
  EXPECT_EQ(registers_in(text, among), (std::vector<Reg>{{RegClass::kPred, 2}, {RegClass::kB64, 9}}));
  EXPECT_TRUE(registers_in(text, {}).empty());
  EXPECT_TRUE(registers_in("", among).empty());
}
