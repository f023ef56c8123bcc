module @capstep attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<3x2xf32> {tf.aliasing_output = 1 : i32} loc("w"), %arg1: tensor<4x3xf32> loc("x"), %arg2: tensor<f32> loc("lr")) -> (tensor<f32> {jax.result_info = "loss"}, tensor<3x2xf32> {jax.result_info = "w.new"}) {
    %0 = stablehlo.dot_general %arg1, %arg0, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
    %1 = stablehlo.multiply %0, %0 : tensor<4x2xf32>
    %init2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %2 = stablehlo.reduce(%1 init: %init2) applies stablehlo.add across dimensions = [0, 1] : (tensor<4x2xf32>, tensor<f32>) -> tensor<f32>
    %3 = stablehlo.constant dense<2.000000e+00> : tensor<4x2xf32>
    %4 = stablehlo.multiply %0, %3 : tensor<4x2xf32>
    %5 = stablehlo.dot_general %arg1, %4, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x3xf32>, tensor<4x2xf32>) -> tensor<3x2xf32>
    %6 = stablehlo.broadcast_in_dim %arg2, dims = [] : (tensor<f32>) -> tensor<3x2xf32>
    %7 = stablehlo.multiply %5, %6 : tensor<3x2xf32>
    %8 = stablehlo.subtract %arg0, %7 : tensor<3x2xf32>
    return %2, %8 : tensor<f32>, tensor<3x2xf32>
  }
}
