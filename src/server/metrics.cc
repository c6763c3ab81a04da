#include "server/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace cachet::server {

namespace {

std::string fmt(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

std::vector<double> exponential_buckets(double start, double factor, int n) {
  std::vector<double> b;
  for (int i = 0; i < n; ++i, start *= factor) b.push_back(start);
  return b;
}

Histogram::Histogram(std::string name, std::string help, std::vector<double> upper_bounds)
    : name_(std::move(name)), help_(std::move(help)), bounds_(std::move(upper_bounds)),
      counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  std::lock_guard<std::mutex> lk(mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

int64_t Histogram::count() const {
  std::lock_guard<std::mutex> lk(mu_);
  return count_;
}

double Histogram::quantile(double q) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (count_ == 0) return 0;
  const double target = q * static_cast<double>(count_);
  int64_t cum = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (counts_[i] > 0 && static_cast<double>(cum + counts_[i]) >= target) {
      const double lo = i == 0 ? 0.0 : bounds_[i - 1];
      if (i == bounds_.size()) return lo;  // the +Inf bucket: its lower bound
      const double frac = (target - static_cast<double>(cum)) / static_cast<double>(counts_[i]);
      return lo + (bounds_[i] - lo) * std::clamp(frac, 0.0, 1.0);
    }
    cum += counts_[i];
  }
  return bounds_.empty() ? 0 : bounds_.back();
}

void Histogram::render(std::string* out) const {
  std::lock_guard<std::mutex> lk(mu_);
  *out += "# HELP " + name_ + " " + help_ + "\n# TYPE " + name_ + " histogram\n";
  int64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    const std::string le = i < bounds_.size() ? fmt(bounds_[i]) : "+Inf";
    *out += name_ + "_bucket{le=\"" + le + "\"} " + std::to_string(cum) + "\n";
  }
  *out += name_ + "_sum " + fmt(sum_) + "\n" + name_ + "_count " + std::to_string(count_) + "\n";
}

LabeledCounter::LabeledCounter(std::string name, std::string help, std::string label)
    : name_(std::move(name)), help_(std::move(help)), label_(std::move(label)) {}

void LabeledCounter::add(const std::string& value, int64_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  values_[value] += n;
}

int64_t LabeledCounter::get(const std::string& value) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = values_.find(value);
  return it == values_.end() ? 0 : it->second;
}

void LabeledCounter::render(std::string* out) const {
  std::lock_guard<std::mutex> lk(mu_);
  *out += "# HELP " + name_ + " " + help_ + "\n# TYPE " + name_ + " counter\n";
  for (const auto& [v, n] : values_) *out += name_ + "{" + label_ + "=\"" + v + "\"} " + std::to_string(n) + "\n";
}

void render_scalar(std::string* out, const std::string& name, const std::string& type, const std::string& help,
                   double value) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + fmt(value) + "\n";
}

}  // namespace cachet::server
