// Prints, for each line of space-separated numbers on stdin (doubles; "nan" allowed), the
// indices in the order libstdc++'s std::sort leaves them with Triton's classification
// comparator (values[i1] > values[i2]):
//   numbers | indices
// A line that starts with "heap " is ordered with std::make_heap and std::sort_heap instead:
// the heapsort std::sort falls back to past its depth limit.
// It made cxx_sort_order.txt (g++ -O2 cxx_sort_order.cc && ./a.out < numbers), which
// sidecar/src/core/cxx_sort.rs is checked against.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<double> values;
    std::istringstream words(line);
    std::string word;
    bool heap = false;
    while (words >> word) {
      if (word == "heap") heap = true;
      else values.push_back(word == "nan" ? NAN : std::stod(word));
    }
    std::vector<size_t> idx(values.size());
    std::iota(idx.begin(), idx.end(), 0);
    auto greater = [&values](size_t a, size_t b) { return values[a] > values[b]; };
    if (heap) {
      std::make_heap(idx.begin(), idx.end(), greater);
      std::sort_heap(idx.begin(), idx.end(), greater);
    } else {
      std::sort(idx.begin(), idx.end(), greater);
    }
    std::cout << line << " |";
    for (size_t i : idx) std::cout << ' ' << i;
    std::cout << '\n';
  }
}
