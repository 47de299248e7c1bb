// The wire form (ps.proto's InitializerDef) of an initializer description: the model's
// Initializer and the client API's InitializerOptions have the same fields.
#pragma once

#include "ps.pb.h"

namespace pstrain {

template <typename Init>
InitializerDef InitializerDefOf(const Init& init) {
  InitializerDef d;
  d.set_kind(init.kind);
  d.set_value(init.value);
  d.set_low(init.low);
  d.set_high(init.high);
  d.set_mean(init.mean);
  d.set_stddev(init.stddev);
  d.set_seed(init.seed);
  return d;
}

}  // namespace pstrain
