// common/option_table.h: the tools' option tables. Rows become Boost
// options (help in row order), handlers run in row order with the value
// given, once per value for repeatable rows, with the row's value when
// absent; the first error ends it; typed() says what Boost would say.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "common/option_table.h"

namespace ipoibd::cli {
namespace {

namespace po = boost::program_options;

struct Seen {
    std::vector<std::string> calls;  // "name=value" in the order applied
};

const Option<Seen> kRows[] = {
    {"help,h", Takes::nothing, "this text"},
    {"listen", Takes::value, "an address",
     [](Seen& s, const std::string& v) -> Applied {
         s.calls.push_back("listen=" + v);
         return {};
     },
     "0.0.0.0:1"},
    {"lid", Takes::values, "repeatable",
     [](Seen& s, const std::string& v) -> Applied {
         if (v == "bad") return unexpected("--lid '" + v + "': no");
         s.calls.push_back("lid=" + v);
         return {};
     }},
    {"quiet,q", Takes::nothing, "a switch",
     [](Seen& s, const std::string& v) -> Applied {
         s.calls.push_back("quiet=" + v);
         return {};
     }},
};

expected<Seen, std::string> run(std::vector<std::string> args) {
    po::options_description desc("test");
    describe<Seen>(kRows, desc);
    po::variables_map vm;
    if (auto error = parse_arguments(args, [&](const std::vector<std::string>& words) {
            po::store(po::command_line_parser(words).options(desc).run(), vm);
            po::notify(vm);
        }))
        return unexpected(*error);
    Seen s;
    if (auto r = apply<Seen>(kRows, vm, s); !r) return unexpected(r.error());
    return s;
}

TEST(OptionTable, HandlersRunInRowOrderNotArgvOrder) {
    const auto s = run({"-q", "--lid", "1", "--listen", "x:2", "--lid", "2"});
    ASSERT_TRUE(s.has_value()) << s.error();
    EXPECT_EQ(s->calls, (std::vector<std::string>{"listen=x:2", "lid=1", "lid=2", "quiet="}));
}

TEST(OptionTable, AbsentRowGetsItsValueOthersNothing) {
    const auto s = run({});
    ASSERT_TRUE(s.has_value()) << s.error();
    EXPECT_EQ(s->calls, (std::vector<std::string>{"listen=0.0.0.0:1"}));
}

TEST(OptionTable, FirstHandlerErrorIsTheAnswer) {
    const auto s = run({"--lid", "1", "--lid", "bad", "--lid", "also-bad"});
    ASSERT_FALSE(s.has_value());
    EXPECT_EQ(s.error(), "--lid 'bad': no");
}

TEST(OptionTable, BoostStillReportsUnknownMissingAndRepeated) {
    EXPECT_EQ(run({"--bogus"}).error(), "unrecognised option '--bogus'");
    EXPECT_EQ(run({"--listen"}).error(), "the required argument for option '--listen' is missing");
    EXPECT_EQ(run({"--listen", "a", "--listen", "b"}).error(), "option '--listen' cannot be specified more than once");
}

// Boost fills its message templates in a loop that never ends when what
// it fills in holds the placeholder's own name: the tools spun on
// "--a%canonical_option%" instead of refusing it (and ipoibd on such a line
// in its configuration file).
TEST(OptionTable, APlaceholderInAnArgumentIsQuotedNotExpandedForEver) {
    EXPECT_EQ(run({"--a%canonical_option%"}).error(), "unrecognised option '--a%canonical_option%'");
    EXPECT_EQ(run({"--%original_token%"}).error(), "unrecognised option '--%original_token%'");
    EXPECT_EQ(run({"--listen", "%value%", "--listen", "b"}).error(), "option '--listen' cannot be specified more than once");
    EXPECT_EQ(run({"--lid", "100%"}).value().calls, std::vector<std::string>({"listen=0.0.0.0:1", "lid=100%"}));  // a value with % is kept as typed
    EXPECT_EQ(typed<unsigned>("ports", "%value%").error(), "the argument ('%value%') for option '--ports' is invalid");
}

TEST(OptionTable, HelpListsTheRowsInOrder) {
    po::options_description desc("test");
    describe<Seen>(kRows, desc);
    std::ostringstream help;
    help << desc;
    const std::string text = help.str();
    EXPECT_LT(text.find("-h [ --help ]"), text.find("--listen arg"));
    EXPECT_LT(text.find("--listen arg"), text.find("--lid arg"));
    EXPECT_LT(text.find("--lid arg"), text.find("-q [ --quiet ]"));
    EXPECT_EQ(text.find("0.0.0.0:1"), std::string::npos) << "the absent value is not shown";
}

// typed<T>() accepts what a po::value<T> accepts and words its refusal the
// same way, so a row that reads a number says what Boost said before.
TEST(OptionTable, TypedSaysWhatBoostSays) {
    for (const std::string text : {"x", "5000000000", "1.5", ""}) {
        po::options_description desc;
        desc.add_options()("ports", po::value<unsigned>(), "");
        po::variables_map vm;
        std::string boost_says;
        try {
            po::store(po::command_line_parser(std::vector<std::string>{"--ports", text}).options(desc).run(), vm);
        } catch (const po::error& e) {
            boost_says = e.what();
        }
        const auto ours = typed<unsigned>("ports", text);
        if (boost_says.empty()) {
            ASSERT_TRUE(ours.has_value()) << text;
            EXPECT_EQ(*ours, vm["ports"].as<unsigned>()) << text;
        } else {
            ASSERT_FALSE(ours.has_value()) << text;
            EXPECT_EQ(ours.error(), boost_says) << text;
        }
    }
    EXPECT_EQ(typed<unsigned>("ports", "-1").value(), 4294967295u) << "lexical_cast wraps, as Boost always did";
    EXPECT_EQ(typed<double>("timeout", "2.5").value(), 2.5);
}

}  // namespace
}  // namespace ipoibd::cli
