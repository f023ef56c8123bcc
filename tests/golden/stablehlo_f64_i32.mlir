module @capstep attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<3xf64> loc("x"), %arg1: tensor<3xi32> loc("k")) -> (tensor<3xf64> {jax.result_info = "exp_plus"}, tensor<i32> {jax.result_info = "kmax"}, tensor<i32> {jax.result_info = "ksum"}, tensor<3xf64> {jax.result_info = "k_as_f64"}, tensor<3xf32> {jax.result_info = "as_f32"}) {
    %0 = stablehlo.exponential %arg0 : tensor<3xf64>
    %1 = stablehlo.constant dense<[1.000000e-01, 3.3333333333333331e-01, -1.000000e-300]> : tensor<3xf64>
    %2 = stablehlo.add %0, %1 : tensor<3xf64>
    %3 = stablehlo.multiply %arg1, %arg1 : tensor<3xi32>
    %4 = stablehlo.negate %3 : tensor<3xi32>
    %5 = stablehlo.maximum %4, %arg1 : tensor<3xi32>
    %init6 = stablehlo.constant dense<-2147483648> : tensor<i32>
    %6 = stablehlo.reduce(%5 init: %init6) applies stablehlo.maximum across dimensions = [0] : (tensor<3xi32>, tensor<i32>) -> tensor<i32>
    %init7 = stablehlo.constant dense<0> : tensor<i32>
    %7 = stablehlo.reduce(%3 init: %init7) applies stablehlo.add across dimensions = [0] : (tensor<3xi32>, tensor<i32>) -> tensor<i32>
    %8 = stablehlo.convert %arg1 : (tensor<3xi32>) -> tensor<3xf64>
    %9 = stablehlo.convert %2 : (tensor<3xf64>) -> tensor<3xf32>
    return %2, %6, %7, %8, %9 : tensor<3xf64>, tensor<i32>, tensor<i32>, tensor<3xf64>, tensor<3xf32>
  }
}
