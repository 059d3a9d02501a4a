// Prints, for each line of space-separated names on stdin, the names in the order a
// std::unordered_map<std::string, int> filled in that order iterates them:
//   given names | iterated names
// It made unordered_map_order.txt (g++ -O2 unordered_map_order.cc && ./a.out < names):
// the order Triton's core checks a request's inputs in (see sidecar/src/core/input_order.rs).
#include <iostream>
#include <sstream>
#include <string>
#include <unordered_map>

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::unordered_map<std::string, int> map;
    std::istringstream words(line);
    std::string word;
    while (words >> word) map.emplace(word, 0);
    std::cout << line << " |";
    for (const auto& entry : map) std::cout << ' ' << entry.first;
    std::cout << '\n';
  }
}
