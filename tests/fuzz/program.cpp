#include "program.h"

#include <array>
#include <utility>

namespace kfuzz {
namespace {

constexpr std::array<std::pair<Form, const char*>, 11> kForms = {{
    {Form::Call, "call"},
    {Form::ScalarRight, "scalar_right"},
    {Form::ScalarLeft, "scalar_left"},
    {Form::InPlace, "in_place"},
    {Form::InPlaceScalar, "in_place_scalar"},
    {Form::Copy, "copy"},
    {Form::Fill, "fill"},
    {Form::Clone, "clone"},
    {Form::Contiguous, "contiguous"},
    {Form::Item, "item"},
    {Form::HostRead, "host_read"},
}};

constexpr std::array<std::pair<Layout, const char*>, 5> kLayouts = {{
    {Layout::Contiguous, "contiguous"},
    {Layout::Transposed, "transposed"},
    {Layout::Stepped, "stepped"},
    {Layout::Offset, "offset"},
    {Layout::Expanded, "expanded"},
}};

}  // namespace

Produces produces(const Step& s) {
  switch (s.form) {
    case Form::InPlace:
    case Form::InPlaceScalar:
    case Form::Copy:
    case Form::Fill:
    case Form::HostRead:
      return Produces::Nothing;
    case Form::Item:
      return Produces::Scalar;
    default:
      return Produces::Value;
  }
}

int count_values(const Program& p, size_t upto) {
  int n = 0;
  for (size_t i = 0; i < upto && i < p.steps.size(); ++i)
    n += produces(p.steps[i]) == Produces::Value;
  return n;
}

int count_scalars(const Program& p, size_t upto) {
  int n = 0;
  for (size_t i = 0; i < upto && i < p.steps.size(); ++i)
    n += produces(p.steps[i]) == Produces::Scalar;
  return n;
}

const char* form_name(Form f) {
  for (const auto& [form, name] : kForms)
    if (form == f) return name;
  return "?";
}

bool parse_form(const std::string& s, Form* out) {
  for (const auto& [form, name] : kForms) {
    if (s == name) {
      *out = form;
      return true;
    }
  }
  return false;
}

const char* layout_name(Layout l) {
  for (const auto& [layout, name] : kLayouts)
    if (layout == l) return name;
  return "?";
}

bool parse_layout(const std::string& s, Layout* out) {
  for (const auto& [layout, name] : kLayouts) {
    if (s == name) {
      *out = layout;
      return true;
    }
  }
  return false;
}

}  // namespace kfuzz
