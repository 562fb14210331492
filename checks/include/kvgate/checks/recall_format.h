// The recall prompts' fixed text: the passkey template and the QA documents' vocabularies.
//
// One copy, read by two sides that must agree byte for byte: the suite's checks (passkey.cc,
// qa_set.cc) build their held-out items from it, and the built-in model's training data
// (readkv/model/src/recall_data.cc) is written in the same forms, so the quality gates test
// prompts of the forms the model was trained on. Only the text lives here: each side draws its
// items from its own random streams (the checks from kvgate::stats::SeededRng under a domain tag,
// the training corpus from kvgate::stats::SplitMixRng), so the checks' items stay held out.
//
// Header-only, no dependencies (target kvgate::recall_format); changing any string changes both
// the checks' prompts and what a model trained from here sees.
#pragma once

#include <array>
#include <string_view>

namespace kvgate::checks {

// The passkey prompt's fixed text, in order (joined by '\n' with the filler lines between).
inline constexpr std::string_view kPasskeyTaskDescription =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
    "them. I will quiz you about the important information there.";
inline constexpr std::string_view kPasskeyFiller =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
inline constexpr std::string_view kPasskeyQuestion = "What is the pass key? The pass key is";

// The QA documents: the task line, then facts about people woven into filler prose.
inline constexpr std::string_view kQaTask =
    "Read the text and remember the facts in it. Answer the question at the end.";

inline constexpr std::array<std::string_view, 120> kNames = {
    "Alice",   "Bob",    "Carol",   "David",   "Emma",   "Frank",   "Grace",   "Henry",    "Irene",
    "Jack",    "Karen",  "Liam",    "Mia",     "Noah",   "Olivia",  "Paul",    "Quinn",    "Rose",
    "Sam",     "Tara",   "Uma",     "Victor",  "Wendy",  "Xavier",  "Yara",    "Zack",     "Amir",
    "Bella",   "Chen",   "Dana",    "Elif",    "Farid",  "Gina",    "Hugo",    "Ines",     "Jonas",
    "Kenji",   "Lena",   "Marco",   "Nadia",   "Omar",   "Priya",   "Rafael",  "Sofia",    "Tomas",
    "Ugo",     "Vera",   "Wei",     "Yusuf",   "Zoe",    "Anton",   "Beatriz", "Cyrus",    "Delia",
    "Emil",    "Fatima", "Gustav",  "Hana",    "Igor",   "Julia",   "Karim",   "Lucia",    "Mateo",
    "Nora",    "Oscar",  "Petra",   "Ravi",    "Selma",  "Teodor",  "Ursula",  "Viktor",   "Willa",
    "Ximena",  "Yosef",  "Zora",    "Arjun",   "Bianca", "Cesar",   "Dmitri",  "Esther",   "Felix",
    "Greta",   "Hector", "Isla",    "Jamal",   "Kira",   "Leon",    "Maya",    "Nikolai",  "Odette",
    "Pablo",   "Rhea",   "Stefan",  "Tessa",   "Ulrich", "Valeria", "Walter",  "Yuki",     "Zainab",
    "Aiden",   "Brigid", "Conrad",  "Dorothy", "Ezra",   "Flora",   "Gideon",  "Helga",    "Ivan",
    "Jasmine", "Klaus",  "Lorenzo", "Miriam",  "Nathan", "Ophelia", "Pierre",  "Rosalind", "Silas",
    "Thea",    "Uriel",  "Vivian"};

inline constexpr std::array<std::string_view, 48> kCities = {
    "Paris",    "London",  "Tokyo",    "Berlin",    "Madrid",    "Rome",     "Vienna",  "Prague",
    "Oslo",     "Lisbon",  "Dublin",   "Warsaw",    "Athens",    "Cairo",    "Nairobi", "Lagos",
    "Lima",     "Bogota",  "Santiago", "Toronto",   "Chicago",   "Boston",   "Denver",  "Seattle",
    "Austin",   "Miami",   "Sydney",   "Perth",     "Auckland",  "Seoul",    "Osaka",   "Beijing",
    "Shanghai", "Mumbai",  "Delhi",    "Dhaka",     "Hanoi",     "Manila",   "Jakarta", "Istanbul",
    "Tehran",   "Baghdad", "Helsinki", "Stockholm", "Amsterdam", "Brussels", "Zurich",  "Geneva"};

inline constexpr std::array<std::string_view, 24> kColors = {
    "red",    "blue",  "green", "yellow", "purple", "orange", "pink",   "brown",
    "black",  "white", "gray",  "violet", "indigo", "teal",   "maroon", "olive",
    "silver", "gold",  "beige", "navy",   "coral",  "amber",  "cyan",   "magenta"};

inline constexpr std::array<std::string_view, 32> kJobs = {
    "teacher", "doctor",    "pilot",      "baker",      "farmer",    "lawyer",  "nurse",
    "chef",    "painter",   "plumber",    "engineer",   "dentist",   "writer",  "singer",
    "tailor",  "gardener",  "butcher",    "carpenter",  "architect", "banker",  "sailor",
    "jeweler", "librarian", "mechanic",   "pharmacist", "potter",    "surgeon", "translator",
    "welder",  "zookeeper", "astronomer", "blacksmith"};

inline constexpr std::array<std::string_view, 40> kProse = {
    "The river runs past the old mill.",       "A cold wind blew across the hills.",
    "The market opens early on Sundays.",      "Birds gathered on the wire at dusk.",
    "The library was quiet all afternoon.",    "Rain fell softly on the tin roof.",
    "The train was late again this morning.",  "Children played football in the park.",
    "The bakery smelled of fresh bread.",      "A small boat drifted near the shore.",
    "The clock in the hall struck noon.",      "Snow covered the roads overnight.",
    "The museum has a new exhibit on maps.",   "Leaves turned red and fell in October.",
    "The lamp on the desk flickered twice.",   "A dog barked somewhere down the street.",
    "The coffee was too hot to drink.",        "Clouds moved slowly over the valley.",
    "The bridge was painted last summer.",     "Someone left a bicycle by the gate.",
    "The garden needs water every day.",       "Old letters were stored in the attic.",
    "The bus stops at the corner each hour.",  "A fox crossed the field at dawn.",
    "The kettle whistled in the kitchen.",     "Waves broke against the rocks all night.",
    "The shop sells candles and soap.",        "The meeting ended earlier than planned.",
    "A tall tree shades the front yard.",      "The moon rose behind the mountains.",
    "Music drifted from an open window.",      "The road bends sharply after the farm.",
    "The soup needs a little more salt.",      "Stars filled the sky above the lake.",
    "The printer ran out of paper again.",     "A gentle breeze moved the curtains.",
    "The cat slept on the warm windowsill.",   "Fresh paint dried on the fence.",
    "The harbor was busy with fishing boats.", "Lights came on one by one in the town."};

}  // namespace kvgate::checks
