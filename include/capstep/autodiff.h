// The differentiation passes' former header: value_and_grad and the other
// Program -> Program passes are declared in transforms.h, which code that
// includes this one gets.
#pragma once

#include "capstep/transforms.h"
