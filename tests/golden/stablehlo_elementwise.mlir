module @capstep attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<2x3xf32> loc("x"), %arg1: tensor<2x3xf32> loc("y")) -> (tensor<2x3xf32> {jax.result_info = "exp"}, tensor<2x3xf32> {jax.result_info = "sqrt"}, tensor<2x3xf32> {jax.result_info = "select"}, tensor<2x3xi32> {jax.result_info = "as_i32"}, tensor<2x3xf32> {jax.result_info = "lt_as_f32"}, tensor<2x3xi1> {jax.result_info = "ge3"}) {
    %0 = stablehlo.add %arg0, %arg1 : tensor<2x3xf32>
    %1 = stablehlo.subtract %0, %arg1 : tensor<2x3xf32>
    %2 = stablehlo.multiply %1, %arg1 : tensor<2x3xf32>
    %3 = stablehlo.divide %2, %0 : tensor<2x3xf32>
    %4 = stablehlo.maximum %3, %arg0 : tensor<2x3xf32>
    %5 = stablehlo.negate %4 : tensor<2x3xf32>
    %6 = stablehlo.exponential %5 : tensor<2x3xf32>
    %7 = stablehlo.log %arg1 : tensor<2x3xf32>
    %8 = stablehlo.tanh %7 : tensor<2x3xf32>
    %9 = stablehlo.rsqrt %arg1 : tensor<2x3xf32>
    %10 = stablehlo.sqrt %arg0 : tensor<2x3xf32>
    %11 = stablehlo.compare LT, %arg0, %arg1, FLOAT : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
    %12 = stablehlo.select %11, %8, %9 : tensor<2x3xi1>, tensor<2x3xf32>
    %13 = stablehlo.convert %arg0 : (tensor<2x3xf32>) -> tensor<2x3xi32>
    %14 = stablehlo.convert %11 : (tensor<2x3xi1>) -> tensor<2x3xf32>
    %15 = stablehlo.constant dense<3> : tensor<2x3xi32>
    %16 = stablehlo.compare GE, %13, %15, SIGNED : (tensor<2x3xi32>, tensor<2x3xi32>) -> tensor<2x3xi1>
    return %6, %10, %12, %13, %14, %16 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xi32>, tensor<2x3xf32>, tensor<2x3xi1>
  }
}
