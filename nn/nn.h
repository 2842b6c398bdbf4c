// Everything in hg::nn: Module and the layers, init, utils, save/load.
#pragma once
#include "nn/batchnorm.h"
#include "nn/conv.h"
#include "nn/embedding.h"
#include "nn/fuse.h"
#include "nn/init.h"
#include "nn/layernorm.h"
#include "nn/layers.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/sequential.h"
#include "nn/serialize.h"
#include "nn/utils.h"
